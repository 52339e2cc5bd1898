#include "stats.hpp"

// Compares every value with every earlier one: quadratic on purpose.
std::size_t count_distinct(const std::vector<int>& values) {
    std::size_t count = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
        bool seen = false;
        for (std::size_t j = 0; j < i; ++j) {
            if (values[j] == values[i]) {
                seen = true;
                break;
            }
        }
        if (!seen) ++count;
    }
    return count;
}
