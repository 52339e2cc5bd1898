#include <cstdio>
#include <vector>

#include "stats.hpp"

int main() {
    std::vector<int> values;
    unsigned state = 12345;
    for (int i = 0; i < 6000; ++i) {
        state = state * 1103515245u + 12345u;
        values.push_back(static_cast<int>((state >> 8) % 4000));
    }
    std::printf("%zu %zu\n", count_primes_below(12000), count_distinct(values));
    return 0;
}
