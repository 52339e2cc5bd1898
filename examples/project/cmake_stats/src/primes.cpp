#include "stats.hpp"

// Trial division of every number by every smaller one: slow on purpose.
static bool is_prime(int n) {
    if (n < 2) return false;
    for (int d = 2; d < n; ++d) {
        if (n % d == 0) return false;
    }
    return true;
}

std::size_t count_primes_below(int bound) {
    std::size_t count = 0;
    for (int n = 0; n < bound; ++n) {
        if (is_prime(n)) ++count;
    }
    return count;
}
