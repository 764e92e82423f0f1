"""Command-line tools: doctor, bench, tune, convert-weights (see `kunlun_triton.cli`)."""
