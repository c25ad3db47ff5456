#include "strato/core/memory.h"

#include <malloc.h>

#include <cstdlib>

namespace strato {

void configure_allocator() {
    if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 64 << 20);
    if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void release_free_memory() { (void)malloc_trim(0); }

}  // namespace strato
