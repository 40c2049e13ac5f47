// SPDX-License-Identifier: GPL-2.0
//! The subset of the `bitflags` crate's macro that abi's sources use, for the module
//! build, which cannot link the crate. Same surface: `bits`, `from_bits`,
//! `from_bits_truncate`, `contains`, `empty`, `all`, `|`. User space gets the real crate.

macro_rules! bitflags {
    (
        $(#[$outer:meta])*
        $vis:vis struct $Name:ident: $T:ty {
            $(
                $(#[$inner:meta])*
                const $Flag:ident = $value:expr;
            )*
        }
    ) => {
        $(#[$outer])*
        $vis struct $Name($T);

        #[allow(dead_code)]
        impl $Name {
            $( $(#[$inner])* pub const $Flag: Self = Self($value); )*
            /// The raw bits.
            pub const fn bits(&self) -> $T { self.0 }
            /// No flag.
            pub const fn empty() -> Self { Self(0) }
            /// Every defined flag.
            pub const fn all() -> Self { Self(0 $(| $value)*) }
            /// The flags, or `None` if an undefined bit is set.
            pub const fn from_bits(bits: $T) -> Option<Self> {
                if bits & !Self::all().0 == 0 { Some(Self(bits)) } else { None }
            }
            /// The flags, undefined bits dropped.
            pub const fn from_bits_truncate(bits: $T) -> Self { Self(bits & Self::all().0) }
            /// Whether every flag of `other` is set.
            pub const fn contains(&self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// Whether no flag is set.
            pub const fn is_empty(&self) -> bool { self.0 == 0 }
        }

        impl core::ops::BitOr for $Name {
            type Output = Self;
            fn bitor(self, o: Self) -> Self { Self(self.0 | o.0) }
        }
    };
}
pub(crate) use bitflags;
