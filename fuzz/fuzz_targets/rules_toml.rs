//! The rules file reader: any text is read or refused with a place in the text, never a
//! panic, and a rule set it accepts can be split for the kernel.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_fwd::rules::RuleSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match RuleSet::from_toml(text) {
        Ok(set) => {
            for kernel_forward in [false, true] {
                let share = set.kernel_share(kernel_forward);
                // A set too large for the kernel's map is refused with an error, not a panic.
                let _ = share.kernel_rules();
                let _ = share.kernel_unclassifiable();
            }
        }
        Err(e) => {
            assert!(e.line >= 1 && e.column >= 1, "{e:?}");
            assert!(e.line <= text.matches('\n').count() + 1, "{e:?}");
        }
    }
});
