// The loader's libbpf boundary without privilege: the one check turns a failed call into a
// message with errno's text and libbpf's own warning, and the typed maps refuse a C++ struct that
// does not match the object's map (checked on an opened, not loaded, skeleton). Label unit.
#include "collector/loader/libbpf_check.h"

#include <gtest/gtest.h>

#include "bpf/migrations.h"
#include "bpf/tlb.h"
#include "collector/loader/bpf_maps.h"
#include "collector/loader/tgid_slot_table.h"
#include "tlb.skel.h"

namespace bpftrain::collector::loader {
namespace {

TEST(LibbpfCheckTest, FailedCallNamesWhatAndErrno) {
  const Status s = check("reading BPF map counts", [] { return -ENOENT; });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), ENOENT);
  EXPECT_EQ(s.message(), "reading BPF map counts: No such file or directory");
  EXPECT_NE(s.where().find("libbpf_check_test.cc:"), std::string::npos) << s.where();
  EXPECT_TRUE(check("a call that worked", [] { return 3; }).ok());
}

TEST(LibbpfCheckTest, PointerCallCarriesLibbpfsOwnMessageOnce) {
  captureLibbpfMessages();
  bpf_object* object = nullptr;
  const Status s = check("cannot open BPF object missing", object, [] {
    return bpf_object__open_file("/nonexistent/missing.bpf.o", nullptr);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(object, nullptr);
  EXPECT_EQ(
      s.message().rfind("cannot open BPF object missing: No such file or directory (libbpf:", 0),
      0u)
      << s.message();
  // The warning explained that call only: the next failure does not inherit it.
  const Status next = check("another call", [] { return -EPERM; });
  EXPECT_EQ(next.message(), "another call: Operation not permitted");
}

Status firstFailure(int& reached) {
  BPFTRAIN_TRY(check("step one", [] { return 0; }));
  reached = 1;
  BPFTRAIN_TRY(check("step two", [] { return -EINVAL; }));
  reached = 2;
  return {};
}

TEST(LibbpfCheckTest, TryReturnsTheFirstFailure) {
  int reached = 0;
  const Status s = firstFailure(reached);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(s.message(), "step two: Invalid argument");
}

struct TlbSkeleton {
  TlbSkeleton() : skel(tlb_bpf__open()) {}
  ~TlbSkeleton() { tlb_bpf__destroy(skel); }
  tlb_bpf* skel;
};

TEST(BpfMapsTest, BindingChecksTheStructAgainstTheObjectsMap) {
  TlbSkeleton tlb;
  ASSERT_NE(tlb.skel, nullptr) << "opening needs no privilege";
  auto right = PerCpuCounters::bind<tlb_flush_counts>(tlb.skel->maps.counts, 2);
  ASSERT_TRUE(right.ok()) << right.status().message();
  EXPECT_EQ(right.value().words(), static_cast<size_t>(TLB_FLUSH_REASONS));
  // Another stem's struct: refused with both sizes named, instead of reading garbage.
  auto wrong = PerCpuCounters::bind<migration_counts>(tlb.skel->maps.counts, 2);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find(
                "key/value size 4/" + std::to_string(sizeof(tlb_flush_counts)) +
                ", the loader expects 4/" + std::to_string(sizeof(migration_counts))),
            std::string::npos)
      << wrong.status().message();
  // A counter block is not the tgid table (checked before anything is created or shared).
  const Status shared = TgidSlotTable().reuseIn(tlb.skel->maps.counts);
  EXPECT_FALSE(shared.ok());
  EXPECT_NE(shared.message().find("has type"), std::string::npos) << shared.message();
  EXPECT_FALSE(PerCpuArray<uint64_t>::bind(nullptr, 2).ok());
}

}  // namespace
}  // namespace bpftrain::collector::loader
