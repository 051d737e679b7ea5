#include "framework/io/hdf5_recorder.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "framework/core/error.h"
#include "framework/core/replace_file.h"
#include "framework/core/utf8_check.h"
#include "framework/io/hdf5_journal.h"

namespace speclab {

namespace {

// ---- column tables ---------------------------------------------------------------------------

enum class Col { kI8, kU8, kI32, kI64, kF32, kF64, kStr };

struct ColumnSpec {
  const char* name;
  Col type;
  // Added after files were written without it: such a file reads it as empty strings / zeros,
  // and a writer that resumes the file creates it (its earlier rows filled the same way). It does
  // not bound the table's rows: a column left shorter (an older binary resumed the file and
  // appended without it) reads its missing tail the same way, and the next append pads it.
  bool optional = false;
};
using Schema = std::vector<ColumnSpec>;

const Schema kRunsSchema = {
    {"run_id", Col::kI64},          {"point", Col::kI64},          {"prompt", Col::kI64},
    {"method", Col::kStr},          {"repeat", Col::kI64},         {"prompt_id", Col::kStr},
    {"category", Col::kStr},        {"drafter", Col::kStr},        {"gamma", Col::kI32},
    {"greedy", Col::kU8},           {"n_prompt_tokens", Col::kI64}, {"n_generated", Col::kI64},
    {"target_forwards", Col::kI64}, {"n_steps", Col::kI64},        {"wall_seconds", Col::kF64},
    {"prefill_seconds", Col::kF64}, {"decode_seconds", Col::kF64}, {"draft_seconds", Col::kF64},
    {"verify_seconds", Col::kF64},  {"accept_seconds", Col::kF64}, {"kv_seconds", Col::kF64},
    {"other_seconds", Col::kF64},   {"stop_reason", Col::kStr},    {"text", Col::kStr},
    {"lossless", Col::kI8},         {"kv_peak_bytes", Col::kI64},  {"kv_seq_peak_bytes", Col::kI64},
    {"turns", Col::kI64, /*optional=*/true},  // 0 in files written before 2026-12-07: one turn
};
const Schema kStepsSchema = {
    {"run_id", Col::kI64},        {"step", Col::kI32},           {"drafted", Col::kI32},
    {"accepted", Col::kI32},      {"bonus", Col::kU8},           {"draft_seconds", Col::kF64},
    {"verify_seconds", Col::kF64}, {"accept_seconds", Col::kF64}, {"kv_seconds", Col::kF64},
    {"source", Col::kStr, /*optional=*/true},
};
const Schema kPositionsSchema = {
    {"run_id", Col::kI64}, {"step", Col::kI32},        {"pos", Col::kI32},     {"p", Col::kF32},
    {"q", Col::kF32},      {"accept_prob", Col::kF32}, {"accepted", Col::kU8},
};
const Schema kTokensSchema = {{"run_id", Col::kI64}, {"index", Col::kI32}, {"token", Col::kI32}};
const Schema kPointsSchema = {{"index", Col::kI64}, {"label", Col::kStr}};
const Schema kPointValuesSchema = {{"point", Col::kI64}, {"key", Col::kStr}, {"value", Col::kStr}};
const Schema kPromptsSchema = {{"id", Col::kStr}, {"category", Col::kStr}, {"text", Col::kStr}};
const Schema kMethodsSchema = {{"name", Col::kStr}};
const Schema kPlanSchema = {{"point", Col::kI64}, {"prompt", Col::kI64}, {"repeat", Col::kI64}};
const Schema kSummarySchema = {
    {"point", Col::kI64},
    {"category", Col::kStr},
    {"method", Col::kStr},
    {"drafter", Col::kStr},
    {"gamma", Col::kI32},
    {"n_runs", Col::kI64},
    {"n_steps", Col::kI64},
    {"drafted", Col::kI64},
    {"accepted", Col::kI64},
    {"examined", Col::kI64},
    {"alpha", Col::kF64},
    {"alpha_lo", Col::kF64},
    {"alpha_hi", Col::kF64},
    {"accepted_fraction", Col::kF64},
    {"mean_accept_prob", Col::kF64},
    {"tau", Col::kF64},
    {"draft_seconds_per_token", Col::kF64},
    {"ar_seconds_per_token", Col::kF64},
    {"cost_ratio", Col::kF64},
    {"spec_wall_seconds", Col::kF64},
    {"ar_wall_seconds", Col::kF64},
    {"spec_decode_tokens", Col::kI64},
    {"ar_decode_tokens", Col::kI64},
    {"speedup", Col::kF64},
    {"predicted_speedup", Col::kF64},
    {"efficiency", Col::kF64},
    {"draft_seconds", Col::kF64},
    {"verify_seconds", Col::kF64},
    {"accept_seconds", Col::kF64},
    {"kv_seconds", Col::kF64},
    {"other_seconds", Col::kF64},
    {"lossless", Col::kI8},
    {"lossless_checked", Col::kI64},
    {"lossless_failed", Col::kI64},
};
const Schema kSummaryPositionsSchema = {
    {"point", Col::kI64},  {"category", Col::kStr}, {"method", Col::kStr}, {"pos", Col::kI32},
    {"trials", Col::kI64}, {"successes", Col::kI64}, {"alpha", Col::kF64}, {"alpha_lo", Col::kF64},
    {"alpha_hi", Col::kF64},
};

// Column values of some rows, by column name: integers and reals in wide types (HDF5 converts
// to the narrower file type on write and back on read), strings as UTF-8.
struct Rows {
  std::map<std::string, std::vector<int64_t>> ints;
  std::map<std::string, std::vector<double>> reals;
  std::map<std::string, std::vector<std::string>> strs;

  void add(const char* col, int64_t v) { ints[col].push_back(v); }
  void add_real(const char* col, double v) { reals[col].push_back(v); }
  void add(const char* col, const std::string& v) { strs[col].push_back(v); }
  const std::vector<int64_t>& i(const char* col) const { return ints.at(col); }
  const std::vector<double>& f(const char* col) const { return reals.at(col); }
  const std::vector<std::string>& s(const char* col) const { return strs.at(col); }
};

bool is_int(Col c) { return c == Col::kI8 || c == Col::kU8 || c == Col::kI32 || c == Col::kI64; }
bool is_real(Col c) { return c == Col::kF32 || c == Col::kF64; }

H5::StrType utf8_type() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

H5::DataType file_type(Col c) {
  switch (c) {
    case Col::kI8: return H5::PredType::STD_I8LE;
    case Col::kU8: return H5::PredType::STD_U8LE;
    case Col::kI32: return H5::PredType::STD_I32LE;
    case Col::kI64: return H5::PredType::STD_I64LE;
    case Col::kF32: return H5::PredType::IEEE_F32LE;
    case Col::kF64: return H5::PredType::IEEE_F64LE;
    case Col::kStr: return utf8_type();
  }
  return H5::PredType::STD_I64LE;
}

bool exists(const H5::Group& g, const std::string& name) { return H5Lexists(g.getId(), name.c_str(), H5P_DEFAULT) > 0; }

void write_int_attr(H5::H5Object& obj, const std::string& name, int64_t v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  H5::Attribute a = obj.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_INT64, &v);
}

void write_str_attr(H5::H5Object& obj, const std::string& name, const std::string& v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  H5::StrType t = utf8_type();
  H5::Attribute a = obj.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
  const char* p = v.c_str();
  a.write(t, &p);
}

// Root attributes that files from older versions may lack: `fallback` then.
std::string read_str_attr(const H5::H5Object& obj, const std::string& name, const std::string& fallback = {}) {
  if (!obj.attrExists(name)) return fallback;
  H5::Attribute a = obj.openAttribute(name);
  if (a.getTypeClass() != H5T_STRING) return fallback;
  std::string v;
  a.read(a.getStrType(), v);
  return v;
}

int64_t read_int_attr(const H5::H5Object& obj, const std::string& name, int64_t fallback) {
  if (!obj.attrExists(name)) return fallback;
  H5::Attribute a = obj.openAttribute(name);
  if (a.getTypeClass() != H5T_INTEGER) return fallback;
  int64_t v = 0;
  a.read(H5::PredType::NATIVE_INT64, &v);
  return v;
}

class Table {
 public:
  Table() = default;
  Table(const H5::Group& group, const Schema* schema) : group_(std::make_shared<H5::Group>(group)), schema_(schema) {}

  static Table create(H5::Group& parent, const std::string& name, const Schema& schema) {
    Table t(parent.createGroup(name), &schema);
    for (const ColumnSpec& c : schema) create_column(*t.group_, c);
    write_int_attr(*t.group_, "complete", 0);
    t.rows_ = 0;
    return t;
  }

  // An empty, extendable, chunked and compressed column.
  static void create_column(H5::Group& g, const ColumnSpec& c) {
    const hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED};
    H5::DataSpace space(1, dims, maxdims);
    H5::DSetCreatPropList plist;
    const hsize_t chunk[1] = {c.type == Col::kStr ? hsize_t(256) : hsize_t(1024)};
    plist.setChunk(1, chunk);
    if (c.type != Col::kStr) plist.setShuffle();
    plist.setDeflate(4);
    g.createDataSet(c.name, file_type(c.type), space, plist);
  }

  // Opens a table: checks every column exists (an optional one may not: `missing_`); rows = min(complete
  // attribute, column extents).
  static Table open(const H5::Group& parent, const std::string& name, const Schema& schema, const std::string& file) {
    if (!exists(parent, name))
      throw Error(ErrorKind::kBadInput, "expected table '" + name + "', found none (not a SpecLab experiment file?)",
                  file, name);
    Table t(parent.openGroup(name), &schema);
    if (!t.group_->attrExists("complete"))
      throw Error(ErrorKind::kBadInput, "expected attribute 'complete', found none", file, name);
    int64_t complete = 0;
    t.group_->openAttribute("complete").read(H5::PredType::NATIVE_INT64, &complete);
    if (complete < 0)
      throw Error(ErrorKind::kBadInput, "expected complete >= 0, found " + std::to_string(complete), file,
                  name + "/complete");
    hsize_t rows = static_cast<hsize_t>(complete);
    for (const ColumnSpec& c : schema) {
      if (!exists(*t.group_, c.name)) {
        if (c.optional) {
          t.missing_->insert(c.name);
          continue;
        }
        throw Error(ErrorKind::kBadInput, "expected column '" + std::string(c.name) + "', found none", file, name);
      }
      H5::DataSpace sp = t.group_->openDataSet(c.name).getSpace();
      if (sp.getSimpleExtentNdims() != 1)
        throw Error(ErrorKind::kBadInput, "expected a 1-D column, found rank " +
                                              std::to_string(sp.getSimpleExtentNdims()), file, name + "/" + c.name);
      hsize_t d[1];
      sp.getSimpleExtentDims(d);
      if (!c.optional) rows = std::min(rows, d[0]);
    }
    t.rows_ = rows;
    return t;
  }

  hsize_t rows() const { return rows_; }

  // Appends rows (every column of the schema must be present with the same length). Does not
  // update `complete`; commit() does.
  void append(const Rows& rows) {
    if (rows.ints.empty() && rows.reals.empty() && rows.strs.empty()) return;  // no rows (e.g. an empty shard's summary)
    size_t n = SIZE_MAX;
    for (const ColumnSpec& c : *schema_) {
      const size_t len = is_int(c.type) ? rows.i(c.name).size() : is_real(c.type) ? rows.f(c.name).size()
                                                                                  : rows.s(c.name).size();
      if (n == SIZE_MAX) n = len;
      SPECLAB_CHECK(len == n, std::string("column ") + c.name + " has a different length");
    }
    if (n == 0 || n == SIZE_MAX) return;
    create_missing();
    const hsize_t start[1] = {rows_}, count[1] = {n}, total[1] = {rows_ + n};
    for (const ColumnSpec& c : *schema_) {
      H5::DataSet& ds = column(c.name);
      if (H5Dset_extent(ds.getId(), total) < 0)
        throw H5::DataSetIException("append", std::string("cannot extend column ") + c.name);
      H5::DataSpace fs = ds.getSpace();
      fs.selectHyperslab(H5S_SELECT_SET, count, start);
      H5::DataSpace ms(1, count);
      if (is_int(c.type)) {
        ds.write(rows.i(c.name).data(), H5::PredType::NATIVE_INT64, ms, fs);
      } else if (is_real(c.type)) {
        ds.write(rows.f(c.name).data(), H5::PredType::NATIVE_DOUBLE, ms, fs);
      } else {
        std::vector<const char*> ptrs;
        for (const auto& s : rows.s(c.name)) ptrs.push_back(s.c_str());
        ds.write(ptrs.data(), utf8_type(), ms, fs);
      }
    }
    rows_ += n;
  }

  void commit() { write_int_attr(*group_, "complete", static_cast<int64_t>(rows_)); }

  // Shrinks every column to `n` rows (dropping uncommitted rows) and commits.
  void truncate(hsize_t n) {
    const hsize_t dims[1] = {n};
    for (const ColumnSpec& c : *schema_)
      if (!missing_->count(c.name) && H5Dset_extent(column(c.name).getId(), dims) < 0)
        throw H5::DataSetIException("truncate", std::string("cannot resize column ") + c.name);
    rows_ = n;
    commit();
  }

  // Reads rows [0, n) of every column. `limit_bytes` bounds the allocation (fuzzed files).
  Rows read(hsize_t n, const std::string& file, uint64_t limit_bytes) const {
    Rows out;
    if (n * 8 > limit_bytes)
      throw Error(ErrorKind::kBadInput, "expected at most " + std::to_string(limit_bytes / 8) + " rows for a " +
                                            std::to_string(limit_bytes) + "-byte budget, found " + std::to_string(n),
                  file, group_->getObjName());
    for (const ColumnSpec& c : *schema_) {
      // An optional column the file lacks, or the tail it lacks (ColumnSpec::optional): defaults.
      hsize_t have = missing_->count(c.name) ? 0 : n;
      std::unique_ptr<H5::DataSet> ds;
      if (have > 0) {
        ds = std::make_unique<H5::DataSet>(group_->openDataSet(c.name));
        if (c.optional) {
          hsize_t d[1];
          ds->getSpace().getSimpleExtentDims(d);
          have = std::min(have, d[0]);
        }
      }
      if (is_int(c.type)) out.ints[c.name].assign(n, 0);
      else if (is_real(c.type)) out.reals[c.name].assign(n, 0.0);
      else out.strs[c.name].assign(n, std::string());
      if (have == 0) continue;
      const hsize_t start[1] = {0}, count[1] = {have};
      H5::DataSpace fs = ds->getSpace();
      fs.selectHyperslab(H5S_SELECT_SET, count, start);
      H5::DataSpace ms(1, count);
      const H5T_class_t cls = ds->getTypeClass();
      const std::string where = group_->getObjName() + "/" + c.name;
      if (is_int(c.type) || is_real(c.type)) {
        if (cls != H5T_INTEGER && cls != H5T_FLOAT)
          throw Error(ErrorKind::kBadInput, "expected a numeric column, found another type class", file, where);
        if (is_int(c.type))
          ds->read(out.ints[c.name].data(), H5::PredType::NATIVE_INT64, ms, fs);
        else
          ds->read(out.reals[c.name].data(), H5::PredType::NATIVE_DOUBLE, ms, fs);
      } else {
        if (cls != H5T_STRING || !ds->getStrType().isVariableStr())
          throw Error(ErrorKind::kBadInput, "expected a variable-length string column, found another type", file, where);
        std::vector<char*> ptrs(have, nullptr);
        H5::StrType t = utf8_type();
        ds->read(ptrs.data(), t, ms, fs);
        auto& v = out.strs[c.name];
        for (hsize_t i = 0; i < have; ++i) v[i] = ptrs[i] ? ptrs[i] : "";
        H5::DataSet::vlenReclaim(ptrs.data(), t, ms);
      }
    }
    return out;
  }

 private:
  // The columns a writer appends to stay open: closing a dataset drops its chunk cache, and the
  // next append would read back and inflate the partly filled chunk it just compressed.
  // Each column's chunk cache is small and preempts fully written chunks first (w0 = 1): with
  // HDF5's default (1 MiB per dataset) every chunk a writer fills stays cached until the MiB is
  // full, so the writer's memory grew with the file, and so did every append, since changing a
  // dataset's extent walks all of its cached chunks (H5D__chunk_update_cache): 3x the commit CPU
  // time at 10^5 prompt-runs than at 10^4. The cache holds the partly filled last chunk and a
  // few more (kColumnCacheBytes, at least 4 of the largest chunk, 1024 x 8 bytes).
  H5::DataSet& column(const char* name) {
    auto it = columns_->find(name);
    if (it == columns_->end()) {
      H5::DSetAccPropList dapl;
      dapl.setChunkCache(kColumnCacheSlots, kColumnCacheBytes, 1.0);
      it = columns_->emplace(name, group_->openDataSet(name, dapl)).first;
    }
    return it->second;
  }
  static constexpr size_t kColumnCacheSlots = 13, kColumnCacheBytes = 32 * 1024;

  // Creates the optional columns this (older) file lacks and pads the ones left shorter than the
  // table (ColumnSpec::optional) to rows_ default values, so that an append writes every column
  // from row rows_.
  void create_missing() {
    for (const ColumnSpec& c : *schema_) {
      if (!c.optional) continue;
      hsize_t from = 0;
      if (missing_->count(c.name)) {
        create_column(*group_, c);
        missing_->erase(c.name);
      } else {
        hsize_t d[1];
        column(c.name).getSpace().getSimpleExtentDims(d);
        from = d[0];
      }
      if (from >= rows_) continue;
      H5::DataSet& ds = column(c.name);
      const hsize_t total[1] = {rows_}, start[1] = {from}, count[1] = {rows_ - from};
      if (H5Dset_extent(ds.getId(), total) < 0)
        throw H5::DataSetIException("append", std::string("cannot extend column ") + c.name);
      H5::DataSpace fs = ds.getSpace(), ms(1, count);
      fs.selectHyperslab(H5S_SELECT_SET, count, start);
      if (is_int(c.type)) {
        const std::vector<int64_t> zeros(count[0], 0);
        ds.write(zeros.data(), H5::PredType::NATIVE_INT64, ms, fs);
      } else if (is_real(c.type)) {
        const std::vector<double> zeros(count[0], 0.0);
        ds.write(zeros.data(), H5::PredType::NATIVE_DOUBLE, ms, fs);
      } else {
        const std::vector<const char*> empty(count[0], "");
        ds.write(empty.data(), utf8_type(), ms, fs);
      }
    }
  }

  // Held by pointer: the HDF5 C++ classes have no safe copy assignment.
  std::shared_ptr<H5::Group> group_;
  std::shared_ptr<std::map<std::string, H5::DataSet>> columns_ = std::make_shared<std::map<std::string, H5::DataSet>>();
  const Schema* schema_ = nullptr;
  hsize_t rows_ = 0;
  std::shared_ptr<std::set<std::string>> missing_ = std::make_shared<std::set<std::string>>();  // optional, absent
};

void append_summary_rows(Table& t, const std::vector<MethodSummary>& rows) {
  Rows r;
  for (const MethodSummary& m : rows) {
    r.add("point", m.point);
    r.add("category", m.category);
    r.add("method", m.method);
    r.add("drafter", m.drafter);
    r.add("gamma", m.gamma);
    r.add("n_runs", m.n_runs);
    r.add("n_steps", m.n_steps);
    r.add("drafted", m.drafted);
    r.add("accepted", m.accepted);
    r.add("examined", m.examined);
    r.add_real("alpha", m.alpha.rate);
    r.add_real("alpha_lo", m.alpha.lo);
    r.add_real("alpha_hi", m.alpha.hi);
    r.add_real("accepted_fraction", m.accepted_fraction);
    r.add_real("mean_accept_prob", m.mean_accept_prob);
    r.add_real("tau", m.tau);
    r.add_real("draft_seconds_per_token", m.draft_seconds_per_token);
    r.add_real("ar_seconds_per_token", m.ar_seconds_per_token);
    r.add_real("cost_ratio", m.cost_ratio);
    r.add_real("spec_wall_seconds", m.spec_wall_seconds);
    r.add_real("ar_wall_seconds", m.ar_wall_seconds);
    r.add("spec_decode_tokens", m.spec_decode_tokens);
    r.add("ar_decode_tokens", m.ar_decode_tokens);
    r.add_real("speedup", m.speedup);
    r.add_real("predicted_speedup", m.predicted_speedup);
    r.add_real("efficiency", m.efficiency);
    r.add_real("draft_seconds", m.draft_seconds);
    r.add_real("verify_seconds", m.verify_seconds);
    r.add_real("accept_seconds", m.accept_seconds);
    r.add_real("kv_seconds", m.kv_seconds);
    r.add_real("other_seconds", m.other_seconds);
    r.add("lossless", m.lossless);
    r.add("lossless_checked", m.lossless_checked);
    r.add("lossless_failed", m.lossless_failed);
  }
  t.append(r);
  t.commit();
}

void append_position_rows(Rows& r, const MethodSummary& m) {
  for (const PositionSummary& p : m.positions) {
    r.add("point", m.point);
    r.add("category", m.category);
    r.add("method", m.method);
    r.add("pos", p.pos);
    r.add("trials", p.alpha.trials);
    r.add("successes", p.alpha.successes);
    r.add_real("alpha", p.alpha.rate);
    r.add_real("alpha_lo", p.alpha.lo);
    r.add_real("alpha_hi", p.alpha.hi);
  }
}

// Rows of a child table (steps, positions, tokens) that belong to committed runs: the prefix
// whose run_id < n_runs (rows are appended in run order).
hsize_t committed_prefix(const Table& child, hsize_t n_runs, const std::string& file, uint64_t limit) {
  Rows r = child.read(child.rows(), file, limit);
  const auto& ids = r.i("run_id");
  hsize_t n = 0;
  while (n < ids.size() && ids[n] >= 0 && static_cast<hsize_t>(ids[n]) < n_runs) ++n;
  return n;
}

}  // namespace

// ---- the file ----------------------------------------------------------------------------------

struct Hdf5Recorder::Impl {
  std::unique_ptr<Hdf5Journal> journal;  // writers: the driver the file is written through
  std::unique_ptr<H5::H5File> file;      // (closed before its journal goes)
  Table runs, steps, positions, tokens;
  std::string path;
  uint64_t read_limit = 0;  // bytes a read may allocate per column
  int64_t committed_runs = 0;  // prompt-runs in the file on disk

  // Flushes HDF5 and commits the journal (see the header); throws Error(kIo, ..., path,
  // "output.path") when that fails, and every later commit then fails too.
  void commit();
  // A writer's file access: through `journal` (created here, journal at `<path>.journal`).
  H5::FileAccPropList journaled_access();
  // Writes one prompt-run's rows (assigns run.run_id) and the `complete` attributes, in the
  // order of the header comment; commit() makes it durable.
  void stage(RunRecord& run);

  void open_tables() {
    H5::Group root = file->openGroup("/");
    runs = Table::open(root, "runs", kRunsSchema, path);
    steps = Table::open(root, "steps", kStepsSchema, path);
    positions = Table::open(root, "positions", kPositionsSchema, path);
    tokens = Table::open(root, "tokens", kTokensSchema, path);
  }

  void set_read_limit() {
    // gzip expands at most ~1032:1; anything beyond that is not data this file can hold.
    read_limit = (static_cast<uint64_t>(file->getFileSize()) + (uint64_t(1) << 20)) * 1100;
  }

  ExperimentData read() const;
};

namespace {

void check_schema_version(const H5::Group& root, const std::string& path) {
  if (!root.attrExists("schema_version"))
    throw Error(ErrorKind::kBadInput, "expected root attribute schema_version, found none (not a SpecLab experiment file)",
                path, "schema_version");
  int64_t v = 0;
  root.openAttribute("schema_version").read(H5::PredType::NATIVE_INT64, &v);
  if (v != kHdf5SchemaVersion)
    throw Error(ErrorKind::kBadInput, "expected schema_version " + std::to_string(kHdf5SchemaVersion) + ", found " +
                                          std::to_string(v), path, "schema_version");
}

template <class F>
auto wrap_h5(const std::string& path, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const H5::Exception& e) {
    throw Error(ErrorKind::kIo, std::string(what) + " failed: " + e.getDetailMsg(), path);
  }
}

std::unique_ptr<H5::H5File> open_file(const std::string& path, unsigned flags,
                                      const H5::FileAccPropList& fapl = H5::FileAccPropList::DEFAULT) {
  H5::Exception::dontPrint();
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorKind::kIo, "cannot open the file", path);
  std::fclose(f);
  bool hdf5 = false;
  try {
    hdf5 = H5::H5File::isHdf5(path);
  } catch (const H5::Exception&) {
    hdf5 = false;
  }
  if (!hdf5) throw Error(ErrorKind::kBadInput, "expected an HDF5 file, found another format", path);
  try {
    return wrap_h5(path, "opening the HDF5 file", [&] {
      return std::make_unique<H5::H5File>(path, flags, H5::FileCreatPropList::DEFAULT, fapl);
    });
  } catch (const Error&) {
    if (hdf5_writer_holds(path))
      throw Error(ErrorKind::kIo,
                  "expected no process writing the file, found one holding its lock (a running speclab run?)", path);
    throw;
  }
}

// The scalar string dataset /<name>; "" when it is absent and not `required`.
std::string read_root_string(const H5::H5File& file, const std::string& name, const std::string& path, bool required) {
  H5::Group root = file.openGroup("/");
  if (!exists(root, name)) {
    if (!required) return {};
    throw Error(ErrorKind::kBadInput, "expected a " + name + " dataset, found none", path);
  }
  H5::DataSet ds = root.openDataSet(name);
  if (ds.getTypeClass() != H5T_STRING || ds.getSpace().getSimpleExtentNpoints() != 1)
    throw Error(ErrorKind::kBadInput, "expected a scalar string, found another type", path, name);
  std::string v;
  ds.read(v, ds.getStrType());
  return v;
}

std::string read_config_yaml(const H5::H5File& file, const std::string& path) {
  return read_root_string(file, "config_yaml", path, true);
}

}  // namespace

void Hdf5Recorder::Impl::commit() {
  bool ok = journal->error().empty();
  if (ok) {
    try {
      file->flush(H5F_SCOPE_GLOBAL);
    } catch (const H5::Exception& e) {
      journal->fail("writing the file failed: " + e.getDetailMsg());  // keeps a driver error first
      ok = false;
    }
  }
  if (!ok || !journal->commit()) {
    // With none recorded there may be no file to keep (a new file's first commit): it said "the file
    // keeps the 0 prompt-runs recorded before" where no file was left. Where a file is left (the
    // file was created, then a later commit failed) the same command is refused; --resume takes it.
    std::error_code ec;
    const bool file_left = std::filesystem::exists(path, ec);
    throw Error(ErrorKind::kIo,
                journal->error() +
                    (committed_runs > 0 ? "; the file keeps the " + std::to_string(committed_runs) +
                                              " prompt-runs recorded before (continue with --resume)"
                     : file_left ? std::string("; no prompt-run was recorded yet (continue with --resume once "
                                               "the cause is fixed)")
                                 : std::string("; no prompt-run was recorded yet (run the command again once the "
                                               "cause is fixed)")),
                path, "output.path");
  }
  committed_runs = static_cast<int64_t>(runs.rows());
}

H5::FileAccPropList Hdf5Recorder::Impl::journaled_access() {
  journal = std::make_unique<Hdf5Journal>(hdf5_journal_path(path));
  const hid_t id = journal->fapl();
  H5::FileAccPropList fapl(id);  // a copy
  H5Pclose(id);
  return fapl;
}

ExperimentData Hdf5Recorder::Impl::read() const {
  ExperimentData d;
  H5::Group root = file->openGroup("/");
  check_schema_version(root, path);
  d.config_yaml = read_config_yaml(*file, path);
  d.resolved_config_yaml = read_root_string(*file, "resolved_config", path, false);  // absent in older files
  auto table_rows = [&](const char* name, const Schema& s) {
    Table t = Table::open(root, name, s, path);
    return t.read(t.rows(), path, read_limit);
  };
  Rows pts = table_rows("points", kPointsSchema);
  for (size_t i = 0; i < pts.i("index").size(); ++i) {
    if (pts.i("index")[i] != static_cast<int64_t>(i))
      throw Error(ErrorKind::kBadInput, "expected index " + std::to_string(i) + ", found " +
                                            std::to_string(pts.i("index")[i]), path, "points/index");
    d.points.push_back({pts.i("index")[i], {}, pts.s("label")[i]});
  }
  Rows pv = table_rows("point_values", kPointValuesSchema);
  for (size_t i = 0; i < pv.i("point").size(); ++i) {
    const int64_t p = pv.i("point")[i];
    if (p < 0 || p >= static_cast<int64_t>(d.points.size()))
      throw Error(ErrorKind::kBadInput, "expected a point index below " + std::to_string(d.points.size()) +
                                            ", found " + std::to_string(p), path, "point_values/point");
    d.points[static_cast<size_t>(p)].values[pv.s("key")[i]] = pv.s("value")[i];
  }
  Rows pr = table_rows("prompts", kPromptsSchema);
  for (size_t i = 0; i < pr.s("id").size(); ++i) d.prompts.push_back({pr.s("id")[i], pr.s("category")[i], pr.s("text")[i]});
  d.methods = table_rows("methods", kMethodsSchema).s("name");
  ExperimentMetadata& m = d.meta;
  m.config_yaml = d.config_yaml;
  m.resolved_config_yaml = d.resolved_config_yaml;
  m.name = read_str_attr(root, "name");
  m.git_revision = read_str_attr(root, "git_revision", "unknown");
  m.torch_version = read_str_attr(root, "torch_version");
  m.cpu_model = read_str_attr(root, "cpu_model");
  m.cpu_cores = read_int_attr(root, "cpu_cores", 0);
  m.memory_bytes = read_int_attr(root, "memory_bytes", 0);
  m.start_time = read_str_attr(root, "start_time");
  m.shard_index = read_int_attr(root, "shard_index", 0);
  m.shard_count = read_int_attr(root, "shard_count", 1);
  m.config_hash = read_str_attr(root, "config_hash");
  m.merged_shards = read_int_attr(root, "merged_shards", 0);
  d.status = read_str_attr(root, "status");
  if (exists(root, "plan")) {  // absent in files written before sharding existed
    Rows pl = table_rows("plan", kPlanSchema);
    for (size_t i = 0; i < pl.i("point").size(); ++i)
      m.plan.push_back({pl.i("point")[i], pl.i("prompt")[i], pl.i("repeat")[i]});
  }

  const hsize_t n_runs = runs.rows();
  Rows r = runs.read(n_runs, path, read_limit);
  d.runs.resize(n_runs);
  for (size_t i = 0; i < n_runs; ++i) {
    RunRecord& x = d.runs[i];
    x.run_id = r.i("run_id")[i];
    if (x.run_id != static_cast<int64_t>(i))
      throw Error(ErrorKind::kBadInput, "expected run_id " + std::to_string(i) + ", found " + std::to_string(x.run_id),
                  path, "runs/run_id");
    x.key = {r.i("point")[i], r.i("prompt")[i], r.s("method")[i], r.i("repeat")[i]};
    if (x.key.point < 0 || x.key.point >= static_cast<int64_t>(d.points.size()) || x.key.prompt < 0 ||
        x.key.prompt >= static_cast<int64_t>(d.prompts.size()) || x.key.repeat < 0)
      throw Error(ErrorKind::kBadInput, "expected point < " + std::to_string(d.points.size()) + " and prompt < " +
                                            std::to_string(d.prompts.size()) + ", found point " +
                                            std::to_string(x.key.point) + ", prompt " + std::to_string(x.key.prompt),
                  path, "runs row " + std::to_string(i));
    x.prompt_id = r.s("prompt_id")[i];
    x.category = r.s("category")[i];
    x.drafter = r.s("drafter")[i];
    x.gamma = r.i("gamma")[i];
    x.greedy = static_cast<uint8_t>(r.i("greedy")[i]);
    x.n_prompt_tokens = r.i("n_prompt_tokens")[i];
    x.n_generated = r.i("n_generated")[i];
    x.target_forwards = r.i("target_forwards")[i];
    x.kv_peak_bytes = r.i("kv_peak_bytes")[i];
    x.kv_seq_peak_bytes = r.i("kv_seq_peak_bytes")[i];
    x.wall_seconds = r.f("wall_seconds")[i];
    x.prefill_seconds = r.f("prefill_seconds")[i];
    x.decode_seconds = r.f("decode_seconds")[i];
    x.draft_seconds = r.f("draft_seconds")[i];
    x.verify_seconds = r.f("verify_seconds")[i];
    x.accept_seconds = r.f("accept_seconds")[i];
    x.kv_seconds = r.f("kv_seconds")[i];
    x.other_seconds = r.f("other_seconds")[i];
    x.stop_reason = r.s("stop_reason")[i];
    x.text = r.s("text")[i];
    x.lossless = static_cast<int8_t>(r.i("lossless")[i]);
    x.turns = std::max<int64_t>(1, r.i("turns")[i]);
    if (x.n_generated < 0 || r.i("n_steps")[i] < 0 || r.i("turns")[i] < 0)
      throw Error(ErrorKind::kBadInput, "expected n_generated >= 0, n_steps >= 0 and turns >= 0", path,
                  "runs row " + std::to_string(i));
  }
  std::vector<int64_t> n_steps = r.i("n_steps");

  // Child rows of uncommitted runs (a killed writer's leftovers) are skipped.
  auto run_of = [&](int64_t id) -> RunRecord* {
    if (id < 0 || static_cast<hsize_t>(id) >= n_runs) return nullptr;
    return &d.runs[static_cast<size_t>(id)];
  };
  Rows s = steps.read(steps.rows(), path, read_limit);
  for (size_t i = 0; i < s.i("run_id").size(); ++i) {
    RunRecord* x = run_of(s.i("run_id")[i]);
    if (!x) continue;
    if (s.i("step")[i] != static_cast<int64_t>(x->steps.size()))
      throw Error(ErrorKind::kBadInput, "expected step " + std::to_string(x->steps.size()) + ", found " +
                                            std::to_string(s.i("step")[i]), path, "steps row " + std::to_string(i));
    StepRecord st;
    st.drafted = static_cast<int32_t>(s.i("drafted")[i]);
    st.accepted = static_cast<int32_t>(s.i("accepted")[i]);
    if (st.drafted < 0 || st.accepted < 0 || st.accepted > st.drafted)
      throw Error(ErrorKind::kBadInput, "expected 0 <= accepted <= drafted, found accepted " +
                                            std::to_string(st.accepted) + ", drafted " + std::to_string(st.drafted),
                  path, "steps row " + std::to_string(i));
    st.bonus = static_cast<uint8_t>(s.i("bonus")[i]);
    st.draft_seconds = s.f("draft_seconds")[i];
    st.verify_seconds = s.f("verify_seconds")[i];
    st.accept_seconds = s.f("accept_seconds")[i];
    st.kv_seconds = s.f("kv_seconds")[i];
    st.source = s.s("source")[i];
    x->steps.push_back(std::move(st));
  }
  Rows p = positions.read(positions.rows(), path, read_limit);
  for (size_t i = 0; i < p.i("run_id").size(); ++i) {
    RunRecord* x = run_of(p.i("run_id")[i]);
    if (!x) continue;
    const int64_t step = p.i("step")[i];
    if (step < 0 || step >= static_cast<int64_t>(x->steps.size()))
      throw Error(ErrorKind::kBadInput, "expected a step below " + std::to_string(x->steps.size()) + ", found " +
                                            std::to_string(step), path, "positions row " + std::to_string(i));
    StepRecord& st = x->steps[static_cast<size_t>(step)];
    if (p.i("pos")[i] != static_cast<int64_t>(st.p.size()) || static_cast<int32_t>(st.p.size()) >= st.drafted)
      throw Error(ErrorKind::kBadInput, "expected pos " + std::to_string(st.p.size()) + " below drafted " +
                                            std::to_string(st.drafted) + ", found " + std::to_string(p.i("pos")[i]),
                  path, "positions row " + std::to_string(i));
    st.p.push_back(static_cast<float>(p.f("p")[i]));
    st.q.push_back(static_cast<float>(p.f("q")[i]));
    st.accept_prob.push_back(static_cast<float>(p.f("accept_prob")[i]));
    st.accepted_mask.push_back(static_cast<uint8_t>(p.i("accepted")[i]));
  }
  Rows t = tokens.read(tokens.rows(), path, read_limit);
  for (size_t i = 0; i < t.i("run_id").size(); ++i) {
    RunRecord* x = run_of(t.i("run_id")[i]);
    if (!x) continue;
    if (t.i("index")[i] != static_cast<int64_t>(x->tokens.size()))
      throw Error(ErrorKind::kBadInput, "expected index " + std::to_string(x->tokens.size()) + ", found " +
                                            std::to_string(t.i("index")[i]), path, "tokens row " + std::to_string(i));
    x->tokens.push_back(static_cast<Token>(t.i("token")[i]));
  }
  for (size_t i = 0; i < n_runs; ++i) {
    const RunRecord& x = d.runs[i];
    if (static_cast<int64_t>(x.steps.size()) != n_steps[i] || static_cast<int64_t>(x.tokens.size()) != x.n_generated)
      throw Error(ErrorKind::kBadInput, "expected " + std::to_string(n_steps[i]) + " steps and " +
                                            std::to_string(x.n_generated) + " tokens, found " +
                                            std::to_string(x.steps.size()) + " and " + std::to_string(x.tokens.size()),
                  path, "runs row " + std::to_string(i));
    for (const StepRecord& st : x.steps)
      if (static_cast<int32_t>(st.p.size()) != st.drafted)
        throw Error(ErrorKind::kBadInput, "expected " + std::to_string(st.drafted) + " positions per step, found " +
                                              std::to_string(st.p.size()), path, "positions of run " + std::to_string(i));
  }
  return d;
}

Hdf5Recorder::Hdf5Recorder(std::string path, std::unique_ptr<Impl> impl) : path_(std::move(path)), impl_(std::move(impl)) {}
Hdf5Recorder::Hdf5Recorder(Hdf5Recorder&&) noexcept = default;
Hdf5Recorder& Hdf5Recorder::operator=(Hdf5Recorder&&) noexcept = default;
Hdf5Recorder::~Hdf5Recorder() = default;

Hdf5Recorder Hdf5Recorder::create(const std::string& given, const ExperimentMetadata& meta,
                                  const std::vector<PointRecord>& points, const std::vector<PromptRecord>& prompts,
                                  const std::vector<std::string>& methods) {
  // Through a symbolic link: the file it leads to is replaced and the link kept (the rename below
  // replaced the link itself, with the journal beside the old file, until 2026-12-07).
  const std::string path = replace_target(given);
  H5::Exception::dontPrint();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  // Written as <path>.partial and renamed once complete: a kill before leaves `path` as it was.
  const std::string tmp = path + ".partial";
  // A running writer of `path` (or of another create's <path>.partial) shares <path>.journal,
  // which this one would truncate, and would go on writing into a file renamed away under it.
  for (const std::string& held : {path, tmp})
    if (hdf5_writer_holds(held))
      throw Error(ErrorKind::kIo,
                  "expected no process writing the file, found one holding its lock (a running speclab run?); stop it "
                  "or wait for it before writing this file",
                  path, "output.path");
  try {
  wrap_h5(path, "creating the experiment file", [&] {
    impl->file = std::make_unique<H5::H5File>(tmp, H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT,
                                              impl->journaled_access());
    H5::Group root = impl->file->openGroup("/");
    write_int_attr(root, "schema_version", kHdf5SchemaVersion);
    write_str_attr(root, "name", meta.name);
    write_str_attr(root, "git_revision", meta.git_revision);
    write_str_attr(root, "torch_version", meta.torch_version);
    write_str_attr(root, "cpu_model", meta.cpu_model);
    write_int_attr(root, "cpu_cores", meta.cpu_cores);
    write_int_attr(root, "memory_bytes", meta.memory_bytes);
    write_str_attr(root, "start_time", meta.start_time);
    write_str_attr(root, "end_time", "");
    write_str_attr(root, "status", "running");
    write_int_attr(root, "resume_count", 0);
    write_int_attr(root, "shard_index", meta.shard_index);
    write_int_attr(root, "shard_count", meta.shard_count);
    write_str_attr(root, "config_hash", meta.config_hash);
    write_int_attr(root, "merged_shards", meta.merged_shards);
    {
      H5::StrType t = utf8_type();
      H5::DataSet ds = root.createDataSet("config_yaml", t, H5::DataSpace(H5S_SCALAR));
      const char* p = meta.config_yaml.c_str();
      ds.write(&p, t);
      if (!meta.resolved_config_yaml.empty()) {
        H5::DataSet rs = root.createDataSet("resolved_config", t, H5::DataSpace(H5S_SCALAR));
        const char* r = meta.resolved_config_yaml.c_str();
        rs.write(&r, t);
      }
    }
    Table pts = Table::create(root, "points", kPointsSchema);
    Table pvs = Table::create(root, "point_values", kPointValuesSchema);
    Rows pr, vr;
    for (const PointRecord& p : points) {
      pr.add("index", p.index);
      pr.add("label", p.label);
      for (const auto& kv : p.values) {
        vr.add("point", p.index);
        vr.add("key", kv.first);
        vr.add("value", kv.second);
      }
    }
    if (!points.empty()) pts.append(pr);
    if (!vr.ints.empty()) pvs.append(vr);
    pts.commit();
    pvs.commit();
    Table prm = Table::create(root, "prompts", kPromptsSchema);
    Rows ro;
    for (const PromptRecord& p : prompts) {
      ro.add("id", p.id);
      ro.add("category", p.category);
      ro.add("text", p.text);
    }
    if (!prompts.empty()) prm.append(ro);
    prm.commit();
    Table mt = Table::create(root, "methods", kMethodsSchema);
    Rows mr;
    for (const auto& m : methods) mr.add("name", m);
    if (!methods.empty()) mt.append(mr);
    mt.commit();
    Table plan = Table::create(root, "plan", kPlanSchema);
    Rows pl;
    for (const PlanGroup& g : meta.plan) {
      pl.add("point", g.point);
      pl.add("prompt", g.prompt);
      pl.add("repeat", g.repeat);
    }
    if (!meta.plan.empty()) plan.append(pl);
    plan.commit();
    impl->runs = Table::create(root, "runs", kRunsSchema);
    impl->steps = Table::create(root, "steps", kStepsSchema);
    impl->positions = Table::create(root, "positions", kPositionsSchema);
    impl->tokens = Table::create(root, "tokens", kTokensSchema);
    impl->commit();
    impl->set_read_limit();
  });
  // A file replaced (--overwrite) keeps its mode, owner and group (until 2026-12-07 the new one had
  // the process's defaults).
  keep_mode_and_owner(path, tmp);
  // A journal a killed writer left belongs to the file being replaced.
  if ((::unlink(hdf5_journal_path(path).c_str()) != 0 && errno != ENOENT) || std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorKind::kIo, "cannot rename " + tmp + " to the output file: " + std::strerror(errno), path,
                "output.path");
  impl->journal->renamed(path);
  } catch (...) {
    impl->file.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  return Hdf5Recorder(path, std::move(impl));
}

Hdf5Recorder Hdf5Recorder::open_for_append(const std::string& given) {
  const std::string path = replace_target(given);  // the file a link leads to, as create()
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  recover_hdf5_journal(path);
  try {
    impl->file = open_file(path, H5F_ACC_RDWR, impl->journaled_access());
  } catch (const Error&) {
    if (impl->journal && !impl->journal->error().empty())  // e.g. another writer holds the file
      throw Error(ErrorKind::kIo, impl->journal->error(), path, "output.path");
    throw;
  }
  // Ours now (locked): a journal left is an incomplete one, whose copy never began.
  if (::unlink(hdf5_journal_path(path).c_str()) != 0 && errno != ENOENT)
    throw Error(ErrorKind::kIo, "cannot remove " + hdf5_journal_path(path) + ": " + std::strerror(errno), path,
                "output.path");
  wrap_h5(path, "opening the experiment file", [&] {
    H5::Group root = impl->file->openGroup("/");
    check_schema_version(root, path);
    impl->set_read_limit();
    impl->open_tables();
    const hsize_t n_runs = impl->runs.rows();
    // Cut off rows a killed writer left behind.
    impl->runs.truncate(n_runs);
    for (Table* t : {&impl->steps, &impl->positions, &impl->tokens})
      t->truncate(committed_prefix(*t, n_runs, path, impl->read_limit));
    write_int_attr(root, "resume_count", read_int_attr(root, "resume_count", 0) + 1);
    write_str_attr(root, "status", "running");
    write_str_attr(root, "end_time", "");  // empty while running (it kept the interrupted run's until 2026-12-05)
    impl->committed_runs = static_cast<int64_t>(n_runs);
    impl->commit();
  });
  return Hdf5Recorder(path, std::move(impl));
}

ExperimentData Hdf5Recorder::read() const {
  return wrap_h5(path_, "reading the experiment file", [&] { return impl_->read(); });
}

std::string Hdf5Recorder::config_yaml() const {
  return wrap_h5(path_, "reading config_yaml", [&] { return read_config_yaml(*impl_->file, path_); });
}

template <class F>
void Hdf5Recorder::guarded(const char* what, F&& f) {
  try {
    wrap_h5(path_, what, f);
  } catch (const std::exception& e) {
    // Half-written changes must not reach the disk with a later commit.
    impl_->journal->fail(std::string(what) + " failed: " + e.what());
    throw;
  }
}

void Hdf5Recorder::append(RunRecord& run) {
  guarded("appending a prompt-run", [&] {
    impl_->stage(run);
    impl_->commit();
  });
}

void Hdf5Recorder::append_all(std::vector<RunRecord>& runs) {
  guarded("appending prompt-runs", [&] {
    for (RunRecord& run : runs) impl_->stage(run);
    impl_->commit();
  });
}


void Hdf5Recorder::Impl::stage(RunRecord& run) {
  {
    Impl& m = *this;
    run.run_id = static_cast<int64_t>(m.runs.rows());
    Rows tok, st, pos, rr;
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      tok.add("run_id", run.run_id);
      tok.add("index", static_cast<int64_t>(i));
      tok.add("token", run.tokens[i]);
    }
    for (size_t s = 0; s < run.steps.size(); ++s) {
      const StepRecord& x = run.steps[s];
      SPECLAB_CHECK(x.p.size() == static_cast<size_t>(x.drafted) && x.q.size() == x.p.size() &&
                        x.accept_prob.size() == x.p.size() && x.accepted_mask.size() == x.p.size(),
                    "per-position arrays must have one entry per drafted token");
      st.add("run_id", run.run_id);
      st.add("step", static_cast<int64_t>(s));
      st.add("drafted", x.drafted);
      st.add("accepted", x.accepted);
      st.add("bonus", x.bonus);
      st.add_real("draft_seconds", x.draft_seconds);
      st.add_real("verify_seconds", x.verify_seconds);
      st.add_real("accept_seconds", x.accept_seconds);
      st.add_real("kv_seconds", x.kv_seconds);
      st.add("source", x.source);
      for (size_t i = 0; i < x.p.size(); ++i) {
        pos.add("run_id", run.run_id);
        pos.add("step", static_cast<int64_t>(s));
        pos.add("pos", static_cast<int64_t>(i));
        pos.add_real("p", x.p[i]);
        pos.add_real("q", x.q[i]);
        pos.add_real("accept_prob", x.accept_prob[i]);
        pos.add("accepted", x.accepted_mask[i]);
      }
    }
    rr.add("run_id", run.run_id);
    rr.add("point", run.key.point);
    rr.add("prompt", run.key.prompt);
    rr.add("method", run.key.method);
    rr.add("repeat", run.key.repeat);
    rr.add("prompt_id", run.prompt_id);
    rr.add("category", run.category);
    rr.add("drafter", run.drafter);
    rr.add("gamma", run.gamma);
    rr.add("greedy", run.greedy);
    rr.add("n_prompt_tokens", run.n_prompt_tokens);
    rr.add("n_generated", run.n_generated);
    rr.add("target_forwards", run.target_forwards);
    rr.add("kv_peak_bytes", run.kv_peak_bytes);
    rr.add("kv_seq_peak_bytes", run.kv_seq_peak_bytes);
    rr.add("turns", run.turns);
    rr.add("n_steps", static_cast<int64_t>(run.steps.size()));
    rr.add_real("wall_seconds", run.wall_seconds);
    rr.add_real("prefill_seconds", run.prefill_seconds);
    rr.add_real("decode_seconds", run.decode_seconds);
    rr.add_real("draft_seconds", run.draft_seconds);
    rr.add_real("verify_seconds", run.verify_seconds);
    rr.add_real("accept_seconds", run.accept_seconds);
    rr.add_real("kv_seconds", run.kv_seconds);
    rr.add_real("other_seconds", run.other_seconds);
    rr.add("stop_reason", run.stop_reason);
    rr.add("text", utf8_replacing_invalid(run.text));  // a cut character made h5py's asstr() fail (until 2026-12-07)
    rr.add("lossless", run.lossless);
    if (!run.tokens.empty()) m.tokens.append(tok);
    if (!run.steps.empty()) m.steps.append(st);
    if (!pos.ints.empty()) m.positions.append(pos);
    m.tokens.commit();
    m.steps.commit();
    m.positions.commit();
    m.runs.append(rr);
    m.runs.commit();  // the run counts from here on (once committed to disk)
  }
}

void Hdf5Recorder::write_summary(const ExperimentSummary& summary) {
  guarded("writing the summary", [&] {
    H5::Group root = impl_->file->openGroup("/");
    if (exists(root, "summary") && H5Ldelete(root.getId(), "summary", H5P_DEFAULT) < 0)
      throw H5::GroupIException("write_summary", "cannot replace /summary");
    H5::Group g = root.createGroup("summary");
    Table overall = Table::create(g, "overall", kSummarySchema);
    append_summary_rows(overall, summary.overall);
    Table by_cat = Table::create(g, "by_category", kSummarySchema);
    append_summary_rows(by_cat, summary.by_category);
    Table pos = Table::create(g, "positions", kSummaryPositionsSchema);
    Rows r;
    for (const auto& m : summary.overall) append_position_rows(r, m);
    for (const auto& m : summary.by_category) append_position_rows(r, m);
    if (!r.ints.empty()) pos.append(r);
    pos.commit();
    impl_->commit();
  });
}

void Hdf5Recorder::set_root_attribute(const std::string& name, const std::string& value) {
  guarded("writing an attribute", [&] {
    H5::Group root = impl_->file->openGroup("/");
    write_str_attr(root, name, value);
    impl_->commit();
  });
}

void Hdf5Recorder::set_root_attribute(const std::string& name, int64_t value) {
  guarded("writing an attribute", [&] {
    H5::Group root = impl_->file->openGroup("/");
    write_int_attr(root, name, value);
    impl_->commit();
  });
}

int64_t Hdf5Recorder::root_int_attribute(const std::string& name, int64_t fallback) const {
  return wrap_h5(path_, "reading an attribute", [&] {
    return read_int_attr(impl_->file->openGroup("/"), name, fallback);
  });
}

ExperimentData read_experiment(const std::string& path) {
  Hdf5Recorder::Impl impl;
  recover_hdf5_journal(path);
  impl.file = open_file(path, H5F_ACC_RDONLY);
  impl.path = path;
  return wrap_h5(path, "reading the experiment file", [&] {
    check_schema_version(impl.file->openGroup("/"), path);
    impl.set_read_limit();
    impl.open_tables();
    return impl.read();
  });
}

}  // namespace speclab
