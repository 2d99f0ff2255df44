//! Large arrays on transparent huge pages.
//!
//! The planner's exchange graph is tens of megabytes on a million-channel fleet, and a plan
//! reads and writes it all over: building the graph scatters each channel's entries to its
//! bot's row, and the arc lists link entries across rows. On 4 KiB pages nearly every such
//! access misses the TLB, and each page costs a fault into the kernel when first touched
//! (about ten thousand a plan on the 1M fleets); on 2 MiB pages the graph needs a few dozen
//! TLB entries and a 512th of the faults.
//!
//! A plan's rows on their way to the database are written once and read once, but they are
//! fresh memory too (a start-up's 367k rows and their key order, ~33 MB), and there a first
//! touch is what costs. On the CI VM, memory its host still backed was first touched at ~2.9
//! GB/s on 4 KiB pages and at 5–19 GB/s on 2 MiB pages (a 512th of the faults); memory the
//! host had taken back, at 0.4–0.7 GB/s either way.
//!
//! The kernel is only advised (`madvise(MADV_HUGEPAGE)`, which the setting most distributions
//! ship with, `transparent_hugepage=madvise`, waits for). It takes the advice for memory not
//! touched yet, such as a block glibc maps afresh for a large allocation (past 32 MB always);
//! pages already in use stay as they are. Where it declines (huge pages `never`, no contiguous
//! memory free) the arrays are ordinary ones and work the same.
//!
//! How the process keeps or gives back what it frees is here too: `plan` keeps it
//! ([`keep_freed_memory`]), the service gives back what a large plan freed
//! (`give_back_freed`).
//!
//! These are the crate's three `unsafe` blocks: rustix marks `madvise` unsafe for the advice
//! that discards memory (`MADV_DONTNEED` and the like), which this never gives; glibc's
//! `mallopt` and `malloc_trim` have no safe wrapper (rustix does not wrap them), and only set
//! the allocator's parameters or discard pages it holds free.

use std::sync::atomic::{AtomicBool, Ordering};

use zerocopy::FromZeros;

/// A huge page of x86-64 and of aarch64 with 4 KiB base pages. Elsewhere the advice covers
/// fewer or more huge pages than it could, which changes nothing else.
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeroed values, allocated as zeroed memory (`calloc`): a block fresh from the kernel
/// is zeroed already, so none of its pages is touched before the advice is given.
pub(crate) fn zeroed<T: FromZeros>(len: usize) -> Vec<T> {
    let mut v = T::new_vec_zeroed(len).expect("memory for the planner's graph");
    advise(&mut v);
    v
}

/// `len` copies of `value`, written after the advice.
pub(crate) fn filled<T: Clone>(len: usize, value: T) -> Vec<T> {
    let mut v = with_capacity(len);
    v.resize(len, value);
    v
}

/// An empty vector with room for `len` values, advised before anything is written to it.
pub(crate) fn with_capacity<T>(len: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    advise(&mut v);
    v
}

/// `v` as `len` zeroed values with room for `room` more: in its own memory when that is
/// large enough (its pages are already the process's), else in fresh memory as [`zeroed`],
/// whose room is never touched until it is used.
pub(crate) fn zeroed_in<T: FromZeros>(v: &mut Vec<T>, len: usize, room: usize) {
    if v.capacity() >= len + room {
        v.clear();
        v.resize_with(len, T::new_zeroed);
    } else {
        *v = zeroed(len + room);
        v.truncate(len);
    }
}

/// Advises huge pages for the whole huge pages inside `v`'s allocation.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn advise<T>(v: &mut Vec<T>) {
    let start = v.as_mut_ptr() as usize;
    let end = start + v.capacity() * size_of::<T>();
    let (first, last) = (
        start.next_multiple_of(HUGE_PAGE),
        end / HUGE_PAGE * HUGE_PAGE,
    );
    if first < last {
        // SAFETY: `MADV_HUGEPAGE` is advice on how memory is backed: it never changes what
        // the memory holds, and the range lies within `v`'s own allocation. Where it fails (a
        // kernel built without huge pages), nothing has changed.
        let _ = unsafe {
            rustix::mm::madvise(
                first as *mut std::ffi::c_void,
                last - first,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
    }
}

/// Other systems have no such advice to give (Linux's `MADV_HUGEPAGE`).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn advise<T>(_: &mut Vec<T>) {}

/// Makes what the process frees serve what it allocates next, instead of going back to the
/// kernel, and `give_back_freed` a no-op: for `plan`.
///
/// glibc maps every block of 32 MiB and more on its own and unmaps it when freed, and gives
/// back the top of its heap past a threshold. A `plan` run frees its largest blocks just
/// before it needs as much again: the input (132 MB at a million channels) once it is parsed,
/// a hash table's old arrays each time it grows. So the planner's arrays came from fresh
/// pages, a fault and a cleared page each 4 KiB (or a huge page the kernel must find), and
/// on a VM whose host has taken memory back, first touches run at a fraction of their usual
/// speed. From one heap whose top is kept, they reuse the pages just freed: on the
/// million-channel snapshot 71k page faults against 90k, the planning phase 0.22–0.27 s in
/// every run against 0.24–0.53 s (docs/performance.md, `--plan-io`). Only `plan` does this:
/// it is one process that ends when the plan is written, so the kernel gets the memory back
/// then; the service runs for months and gives it back as it goes.
pub fn keep_freed_memory() {
    KEEPS_FREED.store(true, Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets glibc's malloc parameters; it takes the allocator's lock,
    // touches no memory of ours, and any value is valid for these two (a bad one is refused
    // with 0, and the defaults stay).
    unsafe {
        // No block on its own mapping (a heap that cannot grow still maps more, as glibc
        // does past a failed `brk`), and the heap's top kept up to 2 GiB, the most `mallopt`
        // takes: more than a plan frees at once.
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
    }
}

/// Whether the process keeps what it frees ([`keep_freed_memory`]).
static KEEPS_FREED: AtomicBool = AtomicBool::new(false);

/// Hands the kernel back the whole pages the allocator holds free inside its heap, after a
/// large plan's graph was freed.
///
/// glibc maps its largest blocks on their own and unmaps them when freed, but the rest of a
/// plan (per-bot lists, its changes, blocks under its mapping threshold, which rises up to
/// 32 MiB as large blocks are freed) comes from the heap, and a heap gives back only its top:
/// at 10M channels, ~250 MB of freed heap stayed resident between plans and under the next
/// plan's peak. `malloc_trim` releases every free page in it (the pages stay mapped, and a
/// later allocation gets them back zeroed on first touch).
pub(crate) fn give_back_freed() {
    if KEEPS_FREED.load(Ordering::Relaxed) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes the allocator's lock and only releases pages of chunks
    // that are free; nothing of ours is touched, and any padding argument is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_hold_what_was_asked_whether_or_not_the_kernel_takes_the_advice() {
        // Large enough for whole huge pages, and a small one the advice skips.
        for len in [3 * HUGE_PAGE, 5] {
            assert!(zeroed::<u32>(len).iter().all(|&x| x == 0));
            let filled = filled(len, u32::MAX);
            assert_eq!(filled.len(), len);
            assert!(filled.iter().all(|&x| x == u32::MAX));
            let mut reused = filled;
            zeroed_in(&mut reused, len / 2, 0);
            assert_eq!(reused.len(), len / 2);
            assert!(reused.iter().all(|&x| x == 0));
            zeroed_in(&mut reused, len + 1, len);
            assert_eq!(reused.len(), len + 1);
            assert!(reused.capacity() > 2 * len, "room for len more");
            assert!(reused.iter().all(|&x| x == 0));
            let mut room = with_capacity::<u64>(len);
            assert!(room.is_empty() && room.capacity() >= len);
            room.extend(0..len as u64);
            assert!(room.iter().enumerate().all(|(i, &x)| x == i as u64));
        }
    }
}
