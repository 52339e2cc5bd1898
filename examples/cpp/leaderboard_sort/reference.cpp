// Leaderboard: reads n entries "name score" and prints them ordered by score,
// highest first; entries with equal scores keep their input order.
#include <iostream>
#include <string>
#include <utility>
#include <vector>

struct Entry {
    std::string name;
    long long score;
};

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n;
    if (!(std::cin >> n)) return 0;
    std::vector<Entry> entries(n);
    for (auto& e : entries) std::cin >> e.name >> e.score;

    // Bubble sort: stable, so ties stay in input order.
    for (int pass = 0; pass < n; ++pass) {
        bool swapped = false;
        for (int i = 0; i + 1 < n - pass; ++i) {
            if (entries[i].score < entries[i + 1].score) {
                std::swap(entries[i], entries[i + 1]);
                swapped = true;
            }
        }
        if (!swapped) break;
    }

    for (int i = 0; i < n; ++i)
        std::cout << i + 1 << ". " << entries[i].name << " " << entries[i].score << "\n";
    return 0;
}
