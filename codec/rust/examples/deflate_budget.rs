//! Measures what deflate_join_budget must allow: per file the codec takes,
//! the bytes one rebuild requests against the chunk's skeleton, plain text
//! and output sizes. Usage: deflate_budget FILE... (files of at most 4 MiB,
//! one chunk each). Prints the largest ratio and its file, and fails if any
//! rebuild overran its budget.
use densefs_codec_rs::*;

fn main() {
    let (mut worst, mut worst_file, mut n, mut failed) = (0f64, String::new(), 0usize, 0usize);
    for path in std::env::args().skip(1) {
        let f = std::fs::read(&path).expect(&path);
        let r = unsafe { densefs_rs_deflate_split(f.as_ptr(), f.len()) };
        if r.status != DENSEFS_RS_OK {
            continue;
        }
        let out = unsafe { std::slice::from_raw_parts(r.data, r.len) };
        let (skeleton, _, plain) = deflate_split_parts(out);
        let Some(allocated) = deflate_join_allocated(skeleton, plain, f.len()) else {
            println!("OVERRAN the budget: {path}");
            failed += 1;
            continue;
        };
        let ratio = allocated as f64 / (skeleton.len() + plain.len() + f.len()) as f64;
        n += 1;
        if std::env::var_os("VERBOSE").is_some() {
            let streams = deflate_streams_recreate(skeleton, plain);
            println!(
                "{allocated} {streams} {} {} {}",
                skeleton.len(),
                plain.len(),
                f.len()
            );
        }
        if ratio > worst {
            worst = ratio;
            worst_file = format!(
                "{path}: {allocated} bytes for {} + {} + {}",
                skeleton.len(),
                plain.len(),
                f.len()
            );
        }
        let mut r = r;
        unsafe { densefs_rs_free(&mut r) };
    }
    println!("{n} files; worst {worst:.2} bytes per byte ({worst_file}); {failed} overran");
    std::process::exit(i32::from(failed > 0));
}
