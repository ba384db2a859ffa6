"""Code shared by commbench and iobench, at the bottom of both: errors, units, inputs, files (the one way to
write), lazy imports, the vocabulary, and the results, importers, report, processes and emulate packages."""
