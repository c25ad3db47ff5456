#pragma once
// Process-wide allocator settings for training and serving.

namespace strato {

/// Keeps glibc malloc from returning large blocks to the OS after every free. libtorch allocates
/// and frees activation-sized buffers (MBs) every step; with glibc's defaults many of them are
/// mmap()ed and unmapped each time, and the page faults of touching them again cost ~30 % of a
/// CNN training step on 2 cores (perf: 27 % of samples in the kernel). Sets M_MMAP_THRESHOLD to
/// 64 MiB and M_TRIM_THRESHOLD to 256 MiB, unless the user set MALLOC_MMAP_THRESHOLD_ or
/// MALLOC_TRIM_THRESHOLD_ (their choice wins). Call once, early in main().
void configure_allocator();

/// Hands the free memory of every malloc arena back to the OS (malloc_trim): after a large,
/// rare free — a model unloaded — that the trim threshold above would otherwise keep, in whichever
/// thread's arena it was allocated.
void release_free_memory();

}  // namespace strato
