#include <cstdio>
#include <vector>

#include "stats.hpp"

static int failures = 0;

static void expect(bool ok, const char* what) {
    if (!ok) {
        std::printf("FAILED: %s\n", what);
        ++failures;
    }
}

int main() {
    expect(count_primes_below(0) == 0, "count_primes_below(0) == 0");
    expect(count_primes_below(3) == 1, "count_primes_below(3) == 1");
    expect(count_primes_below(10) == 4, "count_primes_below(10) == 4");
    expect(count_primes_below(1000) == 168, "count_primes_below(1000) == 168");
    expect(count_distinct({}) == 0, "count_distinct({}) == 0");
    expect(count_distinct({3, 1, 3, 2, 1}) == 3, "count_distinct({3, 1, 3, 2, 1}) == 3");
    expect(count_distinct({-5, 5, -5}) == 2, "count_distinct({-5, 5, -5}) == 2");
    std::printf("%s\n", failures ? "some tests failed" : "all tests passed");
    return failures ? 1 : 0;
}
