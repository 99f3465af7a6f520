//! The one PRNG of everything a seed drives (schedules, restart jitter):
//! small and fixed, so a seed means the same draws on every machine and
//! in every version.

pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A seed for one named stream within `seed`: streams of different
    /// names draw independently (FNV-1a over the name, then mixed).
    pub fn stream(seed: u64, name: &str) -> SplitMix64 {
        let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        SplitMix64(SplitMix64(seed ^ fnv).draw())
    }
}
