//! Every benchmark `xskit bench` knows, written once: its name on the command line (and in
//! JSON), what it measures (the command line's help), and whether the testbed table runs it.
//! Always compiled, so that the command line can name benchmarks without the harness.

/// Declares [`Benchmark`] from one line per benchmark.
macro_rules! benchmarks {
    ($($variant:ident $name:literal table=$table:literal: $help:literal;)+) => {
        /// A benchmark of `xskit bench`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Benchmark {
            $(#[doc = $help] $variant,)+
        }

        impl Benchmark {
            /// Every benchmark, in the command line's order.
            pub const ALL: &'static [Benchmark] = &[$(Benchmark::$variant,)+];

            /// The benchmark's name on `xskit bench`'s command line and in its JSON.
            pub fn name(self) -> &'static str {
                match self {
                    $(Benchmark::$variant => $name,)+
                }
            }

            /// What it measures, as the command line's help says.
            pub fn help(self) -> &'static str {
                match self {
                    $(Benchmark::$variant => $help,)+
                }
            }

            /// Whether the testbed table (`xskit bench` without `-i`) runs it; the others
            /// run on an interface, or on their own.
            pub fn in_testbed_table(self) -> bool {
                match self {
                    $(Benchmark::$variant => $table,)+
                }
            }
        }
    };
}

benchmarks! {
    Rxdrop "rxdrop" table=true: "Receive and drop (recycle every frame to the fill ring)";
    Txpush "txpush" table=true: "Transmit pre-built frames as fast as possible";
    L2fwd "l2fwd" table=true: "Receive, swap MACs, send back on the same socket";
    AfpacketRx "afpacket-rx" table=true: "Baseline: AF_PACKET TPACKET_V3 receive ring";
    AfpacketTx "afpacket-tx" table=true: "Baseline: AF_PACKET sendmmsg with qdisc bypass";
    XdpDrop "xdp-drop" table=true: "Kernel ceiling: an XDP program that counts and drops";
    XdpTx "xdp-tx" table=false: "Kernel ceiling for l2fwd: an XDP program that swaps MACs and \
        sends back (XDP_TX), counting; on a bond the packets leave through the bond's hash";
    XdpRedirect "xdp-redirect" table=false: "Kernel ceiling for forwarding: an XDP program \
        that redirects every packet to `--to IFACE` through a devmap (the kernel's \
        xdp_redirect_map path), counting";
    Pipeline "pipeline" table=false: "In memory, no interface: verdict mixes through the \
        pipeline, pool against per-packet allocation";
    Fwd "fwd" table=true: "Testbed only: `xskit fwd` between two namespaces, against the \
        kernel's bridge";
    Bond "bond" table=false: "Testbed only: XDP_DROP and XDP_TX through xskit's bond programs \
        (a bond of 1 and of 2 members) against the plain programs, and an AF_XDP l2fwd through \
        a bond port, as in the table of Jussi Maki's XDP bonding patch (\"net, bonding: Add \
        XDP support to the bonding driver\")";
    Plot "plot" table=false: "Redraw the chart of a table saved with `xskit bench --json > \
        RESULTS.json`, measuring nothing: `xskit bench plot RESULTS.json [--plot OUT.svg]` \
        (default RESULTS.svg)";
}

impl Benchmark {
    /// Measured on the sending side (its own rate), not fed by a generator.
    pub fn transmits(self) -> bool {
        matches!(self, Benchmark::Txpush | Benchmark::AfpacketTx)
    }

    /// The benchmark named `name` on the command line.
    pub fn by_name(name: &str) -> Option<Benchmark> {
        Benchmark::ALL.iter().copied().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for Benchmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Benchmark {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for Benchmark {
    fn value_variants<'a>() -> &'a [Self] {
        Benchmark::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

#[cfg(test)]
mod tests {
    use super::Benchmark;

    #[test]
    fn each_benchmark_has_one_name_that_finds_it() {
        let mut names: Vec<&str> = Benchmark::ALL.iter().map(|b| b.name()).collect();
        for b in Benchmark::ALL {
            assert_eq!(Benchmark::by_name(b.name()), Some(*b));
            assert_eq!(serde_json::to_value(b).unwrap(), b.name());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Benchmark::ALL.len(), "names are unique");
        assert_eq!(Benchmark::by_name("nothing"), None);
    }
}
