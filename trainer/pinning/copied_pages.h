#pragma once
// Pages a process copied out of its own files (copy-on-write: the data and RELRO sections the
// dynamic loader relocates at start-up, the globals a library writes), moved to one NUMA node.
// They are anonymous memory inside file-backed mappings, so a placement that looks only at
// anonymous mappings leaves them wherever the process started.

#include <cstdint>
#include <span>
#include <utility>

namespace bpftrain::trainer::pinning {

struct AddressRange {
  uintptr_t start = 0, end = 0;
};

// Moves the copied (anonymous, present) pages of `ranges`, private file mappings of this process,
// to `node` with move_pages(2); the file's own pages (page cache, shared with every process that
// maps the library) stay where they are: moving those made a 12 s step with libnccl's 218 MiB.
// The pages are found in /proc/self/pagemap (its flags need no privilege). Returns 0 or the
// first errno met; `moved` counts the pages now on `node`.
int moveCopiedFilePages(std::span<const AddressRange> ranges, int node, long& moved);

}  // namespace bpftrain::trainer::pinning
