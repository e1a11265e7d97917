"""What front ends import without torch: generation settings, events, step records, statistics, errors, paths."""
