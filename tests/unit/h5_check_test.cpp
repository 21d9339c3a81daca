// ST_H5_CHECK: a failing HDF5 call becomes an Error(kHdf5) that carries HDF5's own explanation,
// and a succeeding one hands back its result.
#include "checkpoint/h5_check.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <stdexcept>
#include <string>

#include "common/error.h"

#include "tests/unit/temp_dir.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;

using testing_support::TempDir;

class H5CheckTest : public ::testing::Test {
 protected:
  void SetUp() override { silence_hdf5_auto_print(); }
};

TEST_F(H5CheckTest, MissingFileThrowsWithHdf5Stack) {
  TempDir dir("h5_check_test");
  const std::string path = (dir.path() / "no_such_checkpoint.h5").string();
  try {
    ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    FAIL() << "H5Fopen of a missing file did not throw";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kHdf5);
    const std::string message = e.what();
    EXPECT_NE(message.find("H5Fopen(path.c_str()"), std::string::npos) << message;
    // HDF5's own entries name the file and say what went wrong.
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("unable to open file"), std::string::npos) << message;
    // Outermost first: the API function HDF5 was called through comes right after the call.
    EXPECT_NE(message.find("failed: H5Fopen(): "), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    // The location of the check, relative to the source tree.
    EXPECT_NE(message.find("tests/unit/h5_check_test.cpp:"), std::string::npos) << message;
  }
}

TEST_F(H5CheckTest, ReportedStackIsClearedAfterwards) {
  TempDir dir("h5_check_test");
  const std::string path = (dir.path() / "missing.h5").string();
  EXPECT_THROW(ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), common::Error);
  EXPECT_EQ(take_hdf5_error_stack(), "(HDF5 recorded no error stack)");
}

TEST_F(H5CheckTest, SuccessReturnsTheId) {
  TempDir dir("h5_check_test");
  const std::string path = (dir.path() / "created.h5").string();
  const hid_t file = ST_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));
  EXPECT_GE(file, 0);
  EXPECT_GT(H5Iis_valid(file), 0);
  const herr_t closed = ST_H5_CHECK(H5Fclose(file));
  EXPECT_GE(closed, 0);
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(H5CheckTest, TriStateFalseIsNotAnError) {
  // htri_t is a third integer type: H5Iis_valid on a made-up id is "false" (0), not an error.
  EXPECT_EQ(ST_H5_CHECK(H5Iis_valid(static_cast<hid_t>(123456789))), 0);
}

}  // namespace
}  // namespace shardtune::checkpoint
