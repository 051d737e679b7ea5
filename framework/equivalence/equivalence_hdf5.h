// Writes an EquivalenceReport as the `/equivalence` group of an HDF5 file (schema:
// docs/equivalence.md, equivalence schema_version 1). Same conventions as the experiment file
// (docs/hdf5-schema.md): tables are groups of equally long 1-D column datasets of plain types
// (int32, int64, uint8, float64, variable-length UTF-8 strings), each with an int64 attribute
// `complete` = its row count; no compound types. Torch-free (HDF5 C++ API).
//
// File policy:
//   the file does not exist      -> it is created with root attributes (name, git_revision,
//                                   kind = "speclab-equivalence"), the /config_yaml scalar and
//                                   the /equivalence group;
//   it exists, overwrite false   -> Error(kConfig, ..., path, "output.path"), nothing touched;
//   it exists, overwrite true    -> an experiment file of `speclab run` (it has /runs) keeps
//                                   everything and gets its /equivalence group replaced, when it
//                                   is the same experiment's (its root `name` equals the report's;
//                                   another experiment's is Error(kConfig)); any other file is
//                                   replaced. A half-copied commit of a killed run is finished
//                                   first (recover_hdf5_journal), and a file that a running writer
//                                   holds is Error(kIo).
// Whole or not at all: the file is built in memory (an experiment file is read in and changed
// there), written to `<path>.tmp.<host>.<pid>` and renamed onto `path` (a new file is linked, so
// that a file another check wrote meanwhile is refused, not replaced). A failed write (a full
// disk) or a kill leaves `path` as it was (until 2026-12-07 an experiment file was changed in
// place, and a write that failed half way left it unreadable).
#pragma once

#include <string>

#include "framework/equivalence/equivalence_report.h"

namespace speclab {

constexpr int64_t kEquivalenceSchemaVersion = 1;

struct EquivalenceFileMeta {
  std::string config_yaml;              // the resolved config
  std::string git_revision = "unknown";
};

// What write_equivalence refuses, checked before anything is computed (`speclab check` calls it
// first: the refusal of another experiment's file came after the whole check had run and hid its
// verdict): Error(kConfig) for an existing file without `overwrite` or the experiment file of
// another experiment than `name`, Error(kIo) for a file a running `speclab run` holds. Returns
// whether `path` is an experiment file (the results then go into its /equivalence).
bool check_equivalence_output(const std::string& path, const std::string& name, bool overwrite);

// Throws Error(kConfig) as described above, Error(kIo, ..., path) when the file cannot be
// created or written.
void write_equivalence(const std::string& path, const EquivalenceReport& report, const EquivalenceFileMeta& meta,
                       bool overwrite);

}  // namespace speclab
