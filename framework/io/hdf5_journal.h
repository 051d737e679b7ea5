// Hdf5Journal — an HDF5 virtual file driver that lets a writer change an HDF5 file in place and
// still leave a consistent file after a SIGKILL at any moment (the experiment file's commit,
// docs/hdf5-schema.md "Crash consistency"). Torch-free; HDF5 C API.
//
// Between commits the file on disk is a complete HDF5 file as of the last commit. While a commit
// is prepared (HDF5 calls, then H5Fflush), the driver routes HDF5's writes by address:
//   - bytes at or above the committed end of allocation (space the committed file does not use:
//     new chunks, new heap blocks) go straight to the file;
//   - bytes below it (object headers, chunk indexes, the superblock, a chunk rewritten in place)
//     go to an in-memory overlay of 512-byte pages; reads see the overlay.
// commit() writes the overlay to `<path>.journal` (records and a checksum), copies it into the
// file and unlinks the journal. So a process killed before the journal is complete leaves the
// file as of the last commit (plus unused bytes past its end, which HDF5 ignores); one killed
// while the overlay is copied leaves a complete journal, and recover_hdf5_journal() — which every
// reader calls before opening the file — finishes the copy (the rollback-journal idea of SQLite,
// with redo records). A commit writes what changed (new rows, the touched metadata), never the
// file's earlier data. Nothing is fsync'ed: a process crash is covered, a power cut is not.
//
// The writer holds an exclusive flock on the file while it is open: other writers and readers
// (HDF5 locks files it opens) are refused until it ends, since a reader would see the file change
// under it.
//
// After a failed write or commit the journal refuses further commits (HDF5's in-memory state may
// refer to bytes that never reached the disk) and keeps HDF5's later writes in memory, so the
// file keeps its last commit and still closes cleanly.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <string>

namespace speclab {

class Hdf5Journal {
 public:
  // `journal_path`: where commit() writes its journal (`<output>.journal`, next to the file).
  explicit Hdf5Journal(std::string journal_path);
  ~Hdf5Journal();
  Hdf5Journal(const Hdf5Journal&) = delete;
  Hdf5Journal& operator=(const Hdf5Journal&) = delete;

  // A file access property list (caller closes it) that opens a file through this journal. One
  // file per journal, opened once.
  hid_t fapl();

  // Makes everything HDF5 wrote since the last commit part of the file on disk (call after
  // H5Fflush). False on failure, with error() set; the file on disk then keeps its last commit.
  bool commit();
  // "" or what failed first, e.g. "cannot write results.h5: No space left on device".
  const std::string& error() const;
  // Refuses every later commit, with `what` as error() unless an error came first.
  void fail(const std::string& what);
  // The file was renamed (create() writes `<path>.partial`, then renames it): for messages.
  void renamed(const std::string& data_path);

  // Bytes written to the file and the journal since construction (tests: the cost of a commit).
  uint64_t bytes_written() const;

  struct State;

 private:
  std::shared_ptr<State> state_;  // shared with the open file: HDF5 may close it later
};

// Where the journal of the experiment file at `path` lives: beside the file itself (`path`, or
// where it leads when it is a symbolic link: replace_target in framework/core/replace_file.h),
// plus ".journal". A writer and a reader that name the file through
// different links (a link and its target) find the same journal; until 2026-12-07 it was beside
// the name given, and a reader through the target's own name ignored the half-copied commit of a
// writer through a link (the file read as damaged).
std::string hdf5_journal_path(const std::string& path);

// Finishes a commit that a killed writer left half-copied: when its journal (hdf5_journal_path) is complete and
// no writer holds `path`, copies it into `path` and removes it. An incomplete journal (the writer
// died before the copy began) is left alone; the file is consistent without it. Returns whether
// it copied. Throws Error(kIo, ..., path) when a complete journal cannot be applied (e.g. a
// read-only file).
bool recover_hdf5_journal(const std::string& path);

// Whether a process holds an exclusive lock on `path` (a writer: Hdf5Journal takes one).
bool hdf5_writer_holds(const std::string& path);

// Tests only: `hook(0)` runs when a commit's journal is complete, `hook(1)` when half of it is
// copied into the file (a test's hook _exit()s there to act as a SIGKILL). nullptr: none.
void set_hdf5_journal_test_hook(void (*hook)(int stage));

}  // namespace speclab
