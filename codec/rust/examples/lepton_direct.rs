//! Benchmark helper (tests/bench/codec_bench.sh): lepton_jpeg called
//! directly, with the same features and thread count as densefs' codec, to
//! compare against the C ABI path. Per file: encode, decode and compare (a
//! verified encode, as densefs admits it), then decode again (a read).
//! Usage: lepton_direct THREADS ROUNDS FILE...
//! Prints the best round's totals: bytes, encode+verify CPU seconds, decode
//! CPU seconds.
use std::io::Cursor;

use lepton_jpeg::{EnabledFeatures, LeptonThreadPool, SingleThreadPool, DEFAULT_THREAD_POOL};

/// CPU seconds of this process (user + system, all threads): the machines
/// are shared, so wall time would measure the neighbours.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime and stime are fields 14 and 15 of the file (clock ticks, 100 Hz).
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: u32 = args[1].parse().expect("THREADS");
    let rounds: usize = args[2].parse().expect("ROUNDS");
    let files: Vec<Vec<u8>> = args[3..]
        .iter()
        .map(|p| std::fs::read(p).expect(p))
        .collect();
    let single = SingleThreadPool::default();
    let pool: &dyn LeptonThreadPool = if threads <= 1 {
        &single
    } else {
        &DEFAULT_THREAD_POOL
    };
    let (mut best_enc, mut best_dec) = (f64::MAX, f64::MAX);
    let total: usize = files.iter().map(|f| f.len()).sum();
    for _ in 0..rounds {
        let features = |jpeg: &[u8]| {
            let mut f = EnabledFeatures::compat_lepton_vector_write();
            f.max_jpeg_width = 8192;
            f.max_jpeg_height = 8192;
            f.max_processor_threads = threads.max(1);
            f.max_jpeg_file_size = jpeg.len() as u32;
            f
        };
        let t = cpu_seconds();
        let mut encoded = Vec::new();
        for jpeg in &files {
            let f = features(jpeg);
            let mut lep = Vec::new();
            lepton_jpeg::encode_lepton(
                &mut Cursor::new(jpeg),
                &mut Cursor::new(&mut lep),
                &f,
                pool,
            )
            .expect("encode");
            let mut back = Vec::new();
            lepton_jpeg::decode_lepton(&mut Cursor::new(&lep), &mut back, &f, pool)
                .expect("decode");
            assert!(back == *jpeg, "verification failed");
            encoded.push(lep);
        }
        best_enc = best_enc.min(cpu_seconds() - t);
        let t = cpu_seconds();
        for (jpeg, lep) in files.iter().zip(&encoded) {
            let f = features(jpeg);
            let mut again = Vec::new();
            lepton_jpeg::decode_lepton(&mut Cursor::new(lep), &mut again, &f, pool)
                .expect("decode");
            assert_eq!(again.len(), jpeg.len());
        }
        best_dec = best_dec.min(cpu_seconds() - t);
    }
    println!("{total} {best_enc:.4} {best_dec:.4}");
}
