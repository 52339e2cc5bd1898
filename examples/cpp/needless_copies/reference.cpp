// Org chart report. Employee 0 is the CEO; every other employee i has a
// direct manager parent[i] < i. For each employee, find the manager k levels
// above them (if any) and report how many employees earn strictly more than
// that manager, plus the total salary of those k-th level managers summed
// over all employees that have one.
#include <iostream>
#include <vector>

struct OrgChart {
    std::vector<std::vector<int>> reports;
    std::vector<long long> salary;
};

struct Report {
    long long withManager = 0;
    long long earnMore = 0;
    long long managerSalaryTotal = 0;
};

void visit(const OrgChart& chart, int v, std::vector<int> chain, int k, Report& report);

void visitChildren(const OrgChart& chart, int v, std::vector<int> chain, int k, Report& report) {
    for (int child : chart.reports[v]) visit(chart, child, chain, k, report);
}

void visit(const OrgChart& chart, int v, std::vector<int> chain, int k, Report& report) {
    chain.push_back(v);
    if ((int)chain.size() > k) {
        int boss = chain[chain.size() - 1 - k];
        report.withManager++;
        report.managerSalaryTotal += chart.salary[boss];
        if (chart.salary[v] > chart.salary[boss]) report.earnMore++;
    }
    visitChildren(chart, v, chain, k, report);
}

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, k;
    if (!(std::cin >> n >> k)) return 0;
    OrgChart chart;
    chart.reports.resize(n);
    chart.salary.resize(n);
    for (int i = 1; i < n; ++i) {
        int p;
        std::cin >> p;
        chart.reports[p].push_back(i);
    }
    for (auto& s : chart.salary) std::cin >> s;
    Report report;
    if (n > 0) {
        visit(chart, 0, std::vector<int>(), k, report);
    }
    std::cout << report.withManager << " " << report.earnMore << " " << report.managerSalaryTotal << "\n";
    return 0;
}
