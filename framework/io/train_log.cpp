#include "framework/io/train_log.h"

#include <H5Cpp.h>

#include <string>

#include "framework/core/error.h"
#include "framework/core/replace_file.h"

namespace speclab {

namespace {

void write_column(H5::Group& g, const std::string& name, const std::vector<double>& v) {
  const hsize_t n = v.size();
  H5::DataSpace space(1, &n);
  H5::DataSet ds = g.createDataSet(name, H5::PredType::IEEE_F64LE, space);
  if (n) ds.write(v.data(), H5::PredType::NATIVE_DOUBLE);
}

std::vector<double> read_column(const H5::Group& g, const std::string& name) {
  H5::DataSet ds = g.openDataSet(name);
  hsize_t n = 0;
  ds.getSpace().getSimpleExtentDims(&n);
  std::vector<double> v(n);
  if (n) ds.read(v.data(), H5::PredType::NATIVE_DOUBLE);
  return v;
}

void write_text(H5::H5File& f, const std::string& name, const std::string& text) {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  H5::Attribute a = f.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
  a.write(t, text);
}

// The log's HDF5 file at `path`; errors name `final_path`, the log's own name.
void write_log_file(const std::string& path, const TrainLog& log, const std::string& final_path) {
  try {
    H5::Exception::dontPrint();
    H5::H5File f(path, H5F_ACC_TRUNC);
    H5::Group train = f.createGroup("train");
    write_column(train, "step", log.step);
    write_column(train, "loss", log.loss);
    write_column(train, "feature_loss", log.feature_loss);
    write_column(train, "token_loss", log.token_loss);
    write_column(train, "lr", log.lr);
    H5::Group val = f.createGroup("validation");
    write_column(val, "step", log.eval_step);
    write_column(val, "agreement", log.agreement);
    write_text(f, "config_yaml", log.config_yaml);
    write_text(f, "target_weights_hash", log.target_weights_hash);
    H5::Attribute w = f.createAttribute("wall_seconds", H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
    w.write(H5::PredType::NATIVE_DOUBLE, &log.wall_seconds);
  } catch (const H5::Exception& e) {
    throw Error(ErrorKind::kIo, "cannot write the training log: " + e.getDetailMsg(), final_path);
  }
}

}  // namespace

void write_train_log(const std::string& path, const TrainLog& log) {
  // Written beside the log and renamed over it: a reader never sees a half-written log, and one
  // holding the old file open (h5py in a notebook) neither blocks the write nor is cut off. Until
  // 2026-12-06 the log was truncated in place: a reader's lock failed the training run and left
  // the log empty.
  replace_file(path, [&](const std::string& tmp) { write_log_file(tmp, log, path); });
}

TrainLog read_train_log(const std::string& path) {
  try {
    H5::Exception::dontPrint();
    H5::H5File f(path, H5F_ACC_RDONLY);
    TrainLog log;
    const H5::Group train = f.openGroup("train"), val = f.openGroup("validation");
    log.step = read_column(train, "step");
    log.loss = read_column(train, "loss");
    log.feature_loss = read_column(train, "feature_loss");
    log.token_loss = read_column(train, "token_loss");
    log.lr = read_column(train, "lr");
    log.eval_step = read_column(val, "step");
    log.agreement = read_column(val, "agreement");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    f.openAttribute("config_yaml").read(t, log.config_yaml);
    f.openAttribute("target_weights_hash").read(t, log.target_weights_hash);
    f.openAttribute("wall_seconds").read(H5::PredType::NATIVE_DOUBLE, &log.wall_seconds);
    return log;
  } catch (const H5::Exception& e) {
    throw Error(ErrorKind::kBadInput, "not a training log: " + e.getDetailMsg(), path);
  }
}

}  // namespace speclab
