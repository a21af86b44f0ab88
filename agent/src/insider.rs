//! A lying member, for measuring what one costs (`bench/fleet_liar.py`): only
//! in a build with the `insider` feature, which no release has. Without it
//! both functions are the identity and compile away.

/// The count this agent reports: its own, or `HUNTLB_INSIDER_BUSY`'s.
#[inline]
pub fn busy(own: u32) -> u32 {
    #[cfg(feature = "insider")]
    {
        static LIE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
        if let Some(n) = *LIE.get_or_init(|| std::env::var("HUNTLB_INSIDER_BUSY").ok().and_then(|v| v.parse().ok())) {
            return n;
        }
    }
    own
}

/// Whether a peer's count is taken as reported, without the floor of this
/// agent's own outstanding forwards there (`HUNTLB_INSIDER_NO_FLOOR=1`).
#[inline]
pub fn no_floor() -> bool {
    #[cfg(feature = "insider")]
    {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        return *OFF.get_or_init(|| std::env::var_os("HUNTLB_INSIDER_NO_FLOOR").is_some());
    }
    #[allow(unreachable_code)]
    false
}
