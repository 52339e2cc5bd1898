// Counts monotone lattice paths (moves: right or down) from the top-left to
// the bottom-right cell of a grid, avoiding blocked cells ('#').
// Input: T, then T grids, each as "r c" followed by r rows of c characters.
#include <iostream>
#include <string>
#include <vector>

static std::vector<std::string> grid;
static int rows, cols;

long long countPaths(int r, int c) {
    if (r >= rows || c >= cols) return 0;
    if (grid[r][c] == '#') return 0;
    if (r == rows - 1 && c == cols - 1) return 1;
    return countPaths(r + 1, c) + countPaths(r, c + 1);
}

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int t;
    if (!(std::cin >> t)) return 0;
    while (t--) {
        std::cin >> rows >> cols;
        grid.assign(rows, "");
        for (auto& row : grid) std::cin >> row;
        std::cout << countPaths(0, 0) << "\n";
    }
    return 0;
}
