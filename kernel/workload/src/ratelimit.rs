//! A token bucket for log lines, so that a storm of failing requests (or a hostile device) cannot
//! flood a serial console: a burst of lines passes at once, then at most one line per interval, and
//! every line held back is counted and reported with the next line that passes.

/// Decides which log lines to print, on a caller-supplied monotonic clock.
#[derive(Debug, Clone)]
pub struct RateLimit {
    burst: u32,
    interval_ns: u64,
    tokens: u32,
    /// When the next token is added (`None` until the first line).
    next_token_ns: Option<u64>,
    /// Lines held back since the last line that passed.
    pending_suppressed: u64,
    /// Lines held back in all.
    total_suppressed: u64,
}

/// The verdict on one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Print it, and say that this many lines were held back since the previous printed line.
    Print {
        /// Lines suppressed since the last printed one (0 if none).
        suppressed_before: u64,
    },
    /// Do not print it (it has been counted).
    Suppress,
}

impl RateLimit {
    /// At most `burst` lines at once (at least 1), then one more per `interval_ns`.
    pub const fn new(burst: u32, interval_ns: u64) -> Self {
        let burst = if burst == 0 { 1 } else { burst };
        Self {
            burst,
            interval_ns,
            tokens: burst,
            next_token_ns: None,
            pending_suppressed: 0,
            total_suppressed: 0,
        }
    }

    /// Whether a line at `now_ns` may be printed. Counts it if not.
    pub fn check(&mut self, now_ns: u64) -> Verdict {
        self.refill(now_ns);
        if self.tokens == 0 {
            self.pending_suppressed += 1;
            self.total_suppressed += 1;
            return Verdict::Suppress;
        }
        self.tokens -= 1;
        if self.next_token_ns.is_none() {
            self.next_token_ns = Some(now_ns.saturating_add(self.interval_ns));
        }
        let suppressed_before = core::mem::take(&mut self.pending_suppressed);
        Verdict::Print { suppressed_before }
    }

    fn refill(&mut self, now_ns: u64) {
        let Some(next) = self.next_token_ns else {
            return;
        };
        if now_ns < next || self.interval_ns == 0 {
            if self.interval_ns == 0 {
                self.tokens = self.burst;
            }
            return;
        }
        let earned = (now_ns - next) / self.interval_ns + 1;
        let tokens = u64::from(self.tokens).saturating_add(earned);
        self.tokens = u32::try_from(tokens.min(u64::from(self.burst))).unwrap_or(self.burst);
        self.next_token_ns = if self.tokens == self.burst {
            // Full: the next token's clock starts with the next line.
            None
        } else {
            Some(next.saturating_add(earned.saturating_mul(self.interval_ns)))
        };
    }

    /// Lines held back since the last printed one (to report at the end of a run).
    pub fn pending_suppressed(&self) -> u64 {
        self.pending_suppressed
    }

    /// Returns and resets the count of lines held back since the last printed one (after the caller
    /// has reported them itself).
    pub fn take_pending_suppressed(&mut self) -> u64 {
        core::mem::take(&mut self.pending_suppressed)
    }

    /// Lines held back in all.
    pub fn total_suppressed(&self) -> u64 {
        self.total_suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn burst_then_one_per_interval_with_counts() {
        let mut limit = RateLimit::new(3, SECOND);
        let mut printed = 0;
        // A storm: 1000 lines in the first 10 ms.
        for i in 0..1000 {
            if let Verdict::Print { suppressed_before } = limit.check(i * 10_000) {
                assert_eq!(suppressed_before, 0);
                printed += 1;
            }
        }
        assert_eq!(printed, 3);
        assert_eq!(limit.total_suppressed(), 997);
        assert_eq!(limit.pending_suppressed(), 997);
        // One second after the first line, one more passes and carries the count.
        assert_eq!(limit.check(SECOND / 2), Verdict::Suppress);
        assert_eq!(limit.check(SECOND), Verdict::Print { suppressed_before: 998 });
        assert_eq!(limit.check(SECOND + 1), Verdict::Suppress);
        assert_eq!(limit.pending_suppressed(), 1);
        // After a long quiet spell the whole burst is back, and no more.
        for _ in 0..3 {
            assert!(matches!(limit.check(100 * SECOND), Verdict::Print { .. }));
        }
        assert_eq!(limit.check(100 * SECOND), Verdict::Suppress);
        assert_eq!(limit.total_suppressed(), 1000);
    }

    #[test]
    fn steady_rate_below_the_limit_is_never_suppressed() {
        let mut limit = RateLimit::new(1, SECOND);
        for i in 0..100 {
            assert_eq!(limit.check(i * SECOND), Verdict::Print { suppressed_before: 0 });
        }
        assert_eq!(limit.total_suppressed(), 0);
    }

    #[test]
    fn degenerate_settings_do_not_panic() {
        let mut zero_burst = RateLimit::new(0, SECOND);
        assert!(matches!(zero_burst.check(0), Verdict::Print { .. }));
        assert_eq!(zero_burst.check(1), Verdict::Suppress);
        let mut no_interval = RateLimit::new(2, 0);
        for i in 0..10 {
            assert!(matches!(no_interval.check(i), Verdict::Print { .. }));
        }
        let mut far = RateLimit::new(2, u64::MAX);
        assert!(matches!(far.check(u64::MAX - 2), Verdict::Print { .. }));
        assert!(matches!(far.check(u64::MAX - 2), Verdict::Print { .. }));
        assert_eq!(far.check(u64::MAX - 1), Verdict::Suppress);
    }
}
