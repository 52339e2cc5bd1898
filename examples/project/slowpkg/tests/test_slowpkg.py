from slowpkg import count_common, first_shared, grid_paths


def test_count_common_counts_duplicates_of_ids():
    assert count_common([1, 2, 2, 3], [2, 3, 4]) == 3
    assert count_common([], [1]) == 0
    assert count_common(["a", "b"], ["b", "c", "b"]) == 1


def test_first_shared_keeps_the_order_of_ids():
    assert first_shared([5, 4, 3], [3, 4]) == 4
    assert first_shared([1, 2], [3]) is None


def test_grid_paths():
    assert grid_paths(1, 1) == 1
    assert grid_paths(2, 2) == 2
    assert grid_paths(3, 3) == 6
    assert grid_paths(5, 7) == 210
    assert grid_paths(12, 12) == 705432
