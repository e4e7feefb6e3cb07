use vhost_mpath_tests::{Client, Op};
fn main() {
    let sock = std::env::args().nth(1).unwrap();
    let mut c = Client::connect(std::path::Path::new(&sock), 1).unwrap();
    let data = vec![0xaau8; 131072];
    for len in [4096usize, 65536, 131072] {
        let r = c.batch(&[(
            0,
            Op::Write {
                offset: 0,
                data: &data[..len],
            },
        )]);
        assert!(r[0].is_ok());
        let r = c.batch(&[(0, Op::Read { offset: 0, len })]);
        let d = r.into_iter().next().unwrap().unwrap().into_data();
        let nz = d.iter().filter(|&&b| b != 0).count();
        println!("len {len}: {nz} nonzero bytes of {}", d.len());
    }
}
