// Counts (possibly overlapping) occurrences of each query pattern in a text.
// Input: the text on the first line, then q, then q non-empty patterns, one
// per line.
#include <iostream>
#include <string>

long long countOccurrences(const std::string& text, const std::string& pattern) {
    long long count = 0;
    if (pattern.size() > text.size()) return 0;
    for (size_t i = 0; i + pattern.size() <= text.size(); ++i)
        if (text.substr(i, pattern.size()) == pattern) ++count;
    return count;
}

int main() {
    std::string text;
    if (!std::getline(std::cin, text)) return 0;
    int q = 0;
    std::string line;
    std::getline(std::cin, line);
    q = std::stoi(line);
    for (int i = 0; i < q; ++i) {
        std::string pattern;
        std::getline(std::cin, pattern);
        std::cout << countOccurrences(text, pattern) << "\n";
    }
    return 0;
}
