//! Micro benchmark of number intelligence on the verification path: loading
//! libphonenumber's metadata once, then typing a number (`numbers::lookup`: parse,
//! region, type) and the whole number-type rule a start runs (`NumberRule::check`), on
//! one thread and on two at once (the metadata's regular-expression cache is shared).
//! Numbers are a mix: mobile, fixed, premium rate, invalid, several calling codes.
//!
//! It asserts nothing; it prints. Bounded: a fixed count of lookups.
//!
//! `cargo bench --bench numbers`

use std::time::Instant;

use msgw::core::domain::{Channel, Phone};
use msgw::core::numbers;
use msgw::core::verify::numbers::NumberRule;

const NUMBERS: [&str; 12] = [
    "+380971234567",
    "+380501234567",
    "+449012345678",
    "+447410000001",
    "+442079000001",
    "+14155550100",
    "+4917612345678",
    "+79161234567",
    "+870123456789",
    "+882012345678",
    "+881234000001",
    "+380000000002",
];

/// Lookups per measured run.
const ROUNDS: usize = 20_000;

fn per_call(calls: usize, f: impl Fn(Phone)) -> f64 {
    let phones: Vec<Phone> = NUMBERS
        .iter()
        .map(|n| Phone::parse(n).expect("a number"))
        .collect();
    let started = Instant::now();
    for i in 0..calls {
        f(phones[i % phones.len()]);
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

fn main() {
    let started = Instant::now();
    let codes = numbers::load();
    println!(
        "metadata load (once, at start): {:.1} ms, {codes} calling codes",
        started.elapsed().as_secs_f64() * 1000.0
    );
    let rule = NumberRule::default();
    // Warm the regular-expression cache.
    per_call(NUMBERS.len() * 10, |p| {
        std::hint::black_box(rule.judge(p));
    });
    let calls = NUMBERS.len() * ROUNDS;
    let lookup = per_call(calls, |p| {
        std::hint::black_box(numbers::lookup(p));
    });
    let check = per_call(calls, |p| {
        let _ = std::hint::black_box(rule.check(p, &[Channel::Sms]));
    });
    println!(
        "numbers::lookup, 1 thread:     {:>8.2} µs per number",
        lookup / 1000.0
    );
    println!(
        "NumberRule::check, 1 thread:   {:>8.2} µs per start",
        check / 1000.0
    );
    let two: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    per_call(calls, |p| {
                        let _ = std::hint::black_box(rule.check(p, &[Channel::Sms]));
                    })
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mean = two.iter().sum::<f64>() / two.len().max(1) as f64;
    println!(
        "NumberRule::check, 2 threads:  {:>8.2} µs per start (each thread)",
        mean / 1000.0
    );
}
