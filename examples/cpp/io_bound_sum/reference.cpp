// Reads T rows of integers and prints, for every row, the sum of the row
// followed by the running total of all rows read so far.
#include <iostream>
#include <vector>

int main() {
    int t;
    if (!(std::cin >> t)) return 0;
    long long running = 0;
    for (int r = 0; r < t; ++r) {
        int m;
        std::cin >> m;
        std::vector<long long> row(m);
        for (int i = 0; i < m; ++i) std::cin >> row[i];
        long long s = 0;
        for (long long v : row) s += v;
        running += s;
        std::cout << s << " " << running << std::endl;
    }
    return 0;
}
