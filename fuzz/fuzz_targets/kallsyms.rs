//! Any bytes as `/proc/kallsyms`, which the off-CPU sampler reads to find `__schedule`'s
//! code: reading never panics, a range found is non-empty and starts at a symbol, and
//! cutting a stack with it removes only its innermost machinery.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The BPF crate's own reader, compiled in as it is: the crate links libbpf, which a
// sanitizer build does not need.
#[allow(dead_code)]
#[path = "../../bpf/src/switch_stack.rs"]
mod switch_stack;

fuzz_target!(|data: &[u8]| {
    let found = switch_stack::scheduler_text_in(data);
    if let Some(text) = &found {
        assert!(text.start != 0 && text.start < text.end, "{text:x?}");
    }
    // A stack of the input's first words, as the sampler would cut it.
    let stack: Vec<u64> = data
        .chunks_exact(8)
        .take(16)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect();
    let mut cut = stack.clone();
    switch_stack::cut_machinery(&mut cut, found.as_ref());
    assert!(stack.ends_with(&cut) && stack.len() - cut.len() <= 6);
});
