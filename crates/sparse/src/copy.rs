//! Large host copies with non-temporal ("streaming") stores.
//!
//! An ordinary store to a line that is not in the cache first reads the line from memory (to
//! own it), so copying `b` bytes moves `3b` through the memory bus. The value updates and
//! uploads of a large matrix copy tens to hundreds of megabytes into buffers that nothing reads
//! again from this CPU's caches (a page-locked buffer the GPU's DMA engine reads, a host array
//! read at the next update), and are bound by that traffic. Streaming stores write whole lines
//! without reading them, so such a copy moves `2b`. Where the CPU has no such store (targets
//! other than x86-64) the copy is an ordinary one.

/// Copies of fewer bytes are ordinary: a streaming copy's setup and fence cost more, and a
/// small destination is likely read again soon, from the cache the streaming stores bypass.
pub const STREAMING_MIN_BYTES: usize = 16 << 10;

/// `dst.copy_from_slice(src)` with streaming stores for large copies (see the module
/// documentation). Panics when the lengths differ, as `copy_from_slice` does. The stores are
/// fenced before it returns, so whatever the caller does next (hands the buffer to a DMA
/// transfer, joins other threads) sees them.
pub fn copy_streaming<T: Copy>(src: &[T], dst: &mut [T]) {
    assert_eq!(src.len(), dst.len(), "copy_streaming: lengths differ");
    let bytes = std::mem::size_of_val(src);
    if bytes < STREAMING_MIN_BYTES {
        dst.copy_from_slice(src);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `src` and `dst` are valid for `bytes` bytes each and do not overlap (one is
    // borrowed shared, the other exclusively).
    unsafe {
        stream_bytes(src.as_ptr().cast(), dst.as_mut_ptr().cast(), bytes)
    };
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Copies `bytes` bytes from `src` to `dst` with 16-byte streaming stores (SSE2, which every
/// x86-64 CPU has), the unaligned head and tail with ordinary ones, then fences the stores.
///
/// # Safety
/// `src` must be readable and `dst` writable for `bytes` bytes, and the ranges must not
/// overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_bytes(src: *const u8, dst: *mut u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = (16 - (dst as usize) % 16) % 16;
    let head = head.min(bytes);
    // SAFETY (whole block): every offset below stays within `bytes`, as the caller allows;
    // the streaming stores go to 16-byte aligned addresses (`dst + head` is aligned).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let body = (bytes - head) / 64 * 64;
        let (s, d) = (src.add(head), dst.add(head));
        let mut i = 0;
        while i < body {
            let a = _mm_loadu_si128(s.add(i).cast::<__m128i>());
            let b = _mm_loadu_si128(s.add(i + 16).cast::<__m128i>());
            let c = _mm_loadu_si128(s.add(i + 32).cast::<__m128i>());
            let e = _mm_loadu_si128(s.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(d.add(i).cast::<__m128i>(), a);
            _mm_stream_si128(d.add(i + 16).cast::<__m128i>(), b);
            _mm_stream_si128(d.add(i + 32).cast::<__m128i>(), c);
            _mm_stream_si128(d.add(i + 48).cast::<__m128i>(), e);
            i += 64;
        }
        let done = head + body;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), bytes - done);
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [
            0,
            1,
            15,
            16,
            17,
            63,
            64,
            65,
            STREAMING_MIN_BYTES - 1,
            STREAMING_MIN_BYTES,
            40_001,
        ] {
            for (so, doff) in [(0, 0), (1, 0), (0, 1), (3, 7), (8, 8), (13, 2)] {
                let mut dst = vec![0xAAu8; len + 32];
                copy_streaming(&src[so..so + len], &mut dst[doff..doff + len]);
                assert_eq!(
                    &dst[doff..doff + len],
                    &src[so..so + len],
                    "len {len} at {so}/{doff}"
                );
                assert!(dst[..doff].iter().all(|&b| b == 0xAA), "before, len {len}");
                assert!(
                    dst[doff + len..].iter().all(|&b| b == 0xAA),
                    "after, len {len}"
                );
            }
        }
        let f: Vec<f64> = (0..10_000).map(|i| i as f64 * 0.25 - 7.0).collect();
        let mut g = vec![0.0; 10_000];
        copy_streaming(&f, &mut g);
        assert_eq!(f, g);
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn refuses_other_lengths() {
        copy_streaming(&[1.0f64, 2.0], &mut [0.0f64; 3]);
    }
}
