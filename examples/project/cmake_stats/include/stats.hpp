#pragma once
#include <cstddef>
#include <vector>

// How many primes are strictly below `bound`.
std::size_t count_primes_below(int bound);

// How many different values `values` holds.
std::size_t count_distinct(const std::vector<int>& values);
