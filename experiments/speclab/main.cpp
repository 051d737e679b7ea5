// speclab — the SpecLab command line. Subcommands: generate, bench, export, run, report, check, merge, submit,
// train-draft (experiments/speclab/entry.h).
#include "experiments/speclab/entry.h"

int main(int argc, char** argv) { return speclab::cli::entry(argc, argv); }
