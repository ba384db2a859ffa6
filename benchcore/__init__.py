"""Code shared by commbench and iobench: units, result records, errors, reports."""
