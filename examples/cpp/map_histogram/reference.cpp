// Histogram of sensor readings. Reads n, then n readings (integers in
// [0, 100000]); prints the number of distinct readings, then up to ten lines
// "value count" for the most frequent readings (higher count first, smaller
// value first on ties).
#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n;
    if (!(std::cin >> n)) return 0;
    std::map<int, long long> counts;
    for (int i = 0; i < n; ++i) {
        int x;
        std::cin >> x;
        counts[x]++;
    }
    std::vector<std::pair<int, long long>> entries(counts.begin(), counts.end());
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        if (a.second != b.second) return a.second > b.second;
        return a.first < b.first;
    });
    std::cout << counts.size() << "\n";
    for (size_t i = 0; i < entries.size() && i < 10; ++i)
        std::cout << entries[i].first << " " << entries[i].second << "\n";
    return 0;
}
