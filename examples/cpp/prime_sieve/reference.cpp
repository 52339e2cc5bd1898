// For each query x (0 <= x <= 2000000), prints the smallest prime >= x.
// Input: q, then q integers.
#include <iostream>

bool isPrime(int x) {
    if (x < 2) return false;
    for (int d = 2; d * d <= x; ++d)
        if (x % d == 0) return false;
    return true;
}

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int q;
    if (!(std::cin >> q)) return 0;
    for (int i = 0; i < q; ++i) {
        int x;
        std::cin >> x;
        int p = x;
        while (!isPrime(p)) ++p;
        std::cout << p << "\n";
    }
    return 0;
}
