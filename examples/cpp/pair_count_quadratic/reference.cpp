// Counts the pairs (i, j), i < j, whose values sum to at most K.
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n;
    long long k;
    if (!(std::cin >> n >> k)) return 0;
    std::vector<long long> a(n);
    for (auto& x : a) std::cin >> x;
    long long count = 0;
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j)
            if (a[i] + a[j] <= k) ++count;
    std::cout << count << "\n";
    return 0;
}
