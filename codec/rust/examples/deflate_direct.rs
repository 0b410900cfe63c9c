//! Benchmark helper for the deflate codec: per file, densefs' split (gzip
//! parse + preflate), its join (preflate rebuild + the kept bytes), and
//! preflate-rs's own whole-stream recreate on the same streams, to compare
//! densefs' decode with the library's own. Files the codec refuses are
//! counted and skipped. Usage: deflate_direct FILE...
//! Prints bytes in, plain bytes, skeleton bytes, refusals, and CPU seconds
//! of split, join and the library's recreate.
use densefs_codec_rs::*;

/// CPU seconds of this process (user + system, all threads).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn bytes(r: &densefs_rs_result) -> Vec<u8> {
    if r.len == 0 {
        Vec::new()
    } else {
        unsafe { std::slice::from_raw_parts(r.data, r.len) }.to_vec()
    }
}

fn main() {
    let files: Vec<Vec<u8>> = std::env::args()
        .skip(1)
        .map(|p| std::fs::read(&p).expect(&p))
        .collect();
    let (mut total, mut plain_total, mut skel_total, mut refused) =
        (0usize, 0usize, 0usize, 0usize);
    let mut splits = Vec::new();
    let t0 = cpu_seconds();
    for f in &files {
        let mut r = unsafe { densefs_rs_deflate_split(f.as_ptr(), f.len()) };
        if r.status != DENSEFS_RS_OK {
            refused += 1;
            let msg = unsafe { std::ffi::CStr::from_ptr(r.error) };
            eprintln!("refused: {}", msg.to_string_lossy());
        } else {
            let out = bytes(&r);
            let (skeleton, _, plain) = deflate_split_parts(&out);
            total += f.len();
            skel_total += skeleton.len();
            plain_total += plain.len();
            splits.push((f, out));
        }
        unsafe { densefs_rs_free(&mut r) };
    }
    let t1 = cpu_seconds();
    for (f, out) in &splits {
        let (s, _, p) = deflate_split_parts(out);
        let mut r =
            unsafe { densefs_rs_deflate_join(s.as_ptr(), s.len(), p.as_ptr(), p.len(), f.len()) };
        assert_eq!(r.status, DENSEFS_RS_OK);
        assert!(bytes(&r) == **f, "join differs");
        unsafe { densefs_rs_free(&mut r) };
    }
    let t2 = cpu_seconds();
    // The library alone: recreate each member's deflate stream from its
    // plain text and corrections (what the join does minus our framing).
    let mut streams = 0usize;
    for (_, out) in &splits {
        let (s, _, p) = deflate_split_parts(out);
        streams += deflate_streams_recreate(s, p);
    }
    let t3 = cpu_seconds();
    println!(
        "files {} refused {} bytes {} plain {} skeleton {} streams {} split_s {:.2} join_s {:.2} library_recreate_s {:.2}",
        files.len(), refused, total, plain_total, skel_total, streams, t1 - t0, t2 - t1, t3 - t2
    );
}
