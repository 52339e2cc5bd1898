"""Counting monotone paths on a grid."""


def grid_paths(rows, cols):
    """The number of paths from the top-left to the bottom-right corner of a grid of
    ``rows`` x ``cols`` cells, moving only right or down."""
    if rows == 1 or cols == 1:
        return 1
    return grid_paths(rows - 1, cols) + grid_paths(rows, cols - 1)
