"""Comparing two lists of ids."""


def count_common(ids, others):
    """How many entries of ``ids`` also occur in ``others`` (duplicates in ``ids`` count
    each time)."""
    count = 0
    for item in ids:
        if item in others:
            count += 1
    return count


def first_shared(ids, others):
    """The first entry of ``ids`` that also occurs in ``others``, or None."""
    for item in ids:
        if item in others:
            return item
    return None
