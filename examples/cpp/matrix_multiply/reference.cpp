// Multiplies an n x m matrix A by an m x p matrix B, both filled from a
// seeded pseudo-random generator, and prints for every row of C = A * B the
// largest entry and the first column where it occurs.
#include <cstdint>
#include <iostream>
#include <vector>

static uint64_t state;

static int nextValue() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((state >> 33) % 2001) - 1000;  // in [-1000, 1000]
}

int main() {
    int n, m, p;
    if (!(std::cin >> n >> m >> p >> state)) return 0;
    std::vector<std::vector<int>> a(n, std::vector<int>(m)), b(m, std::vector<int>(p));
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < m; ++k) a[i][k] = nextValue();
    for (int k = 0; k < m; ++k)
        for (int j = 0; j < p; ++j) b[k][j] = nextValue();

    std::vector<std::vector<int>> c(n, std::vector<int>(p, 0));
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < p; ++j) {
            int s = 0;
            for (int k = 0; k < m; ++k) s += a[i][k] * b[k][j];
            c[i][j] = s;
        }

    for (int i = 0; i < n; ++i) {
        if (p == 0) {
            std::cout << "-\n";
            continue;
        }
        int best = 0;
        for (int j = 1; j < p; ++j)
            if (c[i][j] > c[i][best]) best = j;
        std::cout << c[i][best] << " " << best << "\n";
    }
    return 0;
}
