"""Tests of the repository as a whole: README and docs against the tree, import direction and graph, hygiene,
CI's extras, the suite's own groups, clock and layout, every command's --help, the type check."""
