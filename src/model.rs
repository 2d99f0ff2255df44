//! Identifiers shared by every module.
//!
//! Ids are strings exactly as the platform reports them (OneBot: decimal QQ and group numbers).
//! A *key* joins a platform and an id as `platform:id`, the form Koishi and the plugin's config
//! use; the platform is everything before the first `:`, so ids may themselves contain `:`.
//! An id that is a canonical decimal number may travel and be stored as that number
//! ([`canonical_number`], [`ChannelIds`]): the two stand for each other one to one.

/// Splits `platform:id` at the first `:`; `None` for a short id (no `:`) or an empty side.
pub fn split_key(key: &str) -> Option<(&str, &str)> {
    let (platform, id) = key.split_once(':')?;
    (!platform.is_empty() && !id.is_empty()).then_some((platform, id))
}

/// Dense index of a bot within one platform of the [`crate::index::FleetIndex`].
pub type BotIx = u32;
/// Dense index of a channel within one platform of the [`crate::index::FleetIndex`].
pub type ChanIx = u32;

/// Whether bit `i` of `bits` is set (false past the end).
#[inline]
pub(crate) fn bit_set(bits: &[u64], i: u32) -> bool {
    bits.get(i as usize / 64)
        .is_some_and(|w| w >> (i % 64) & 1 == 1)
}

/// The number an id writes in canonical decimal (digits only, no leading zero, below 10^19 so
/// it fits): such ids and their numbers correspond one to one, so the number can stand for the
/// text. `None` for any other id.
pub fn canonical_number(id: &str) -> Option<u64> {
    let digits = id.as_bytes();
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// A bot's channels as a source reports them. Most are QQ groups, canonical decimal numbers
/// ([`canonical_number`]): those travel as numbers, so a group list of 5,000 is one allocation
/// rather than 5,000 strings, and the index interns them by value without reading any text.
/// Every id is kept where it belongs (collecting strings sorts each into its part), so two
/// lists of the same ids in the same order are equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelIds {
    numbers: Vec<u64>,
    texts: Vec<String>,
}

impl ChannelIds {
    /// Channels that are numbers (OneBot's positive group ids). A number of 20 digits has no
    /// canonical form here ([`canonical_number`] stops at 19), so it goes with the texts.
    pub fn from_numbers(mut numbers: Vec<u64>) -> Self {
        const TWENTY_DIGITS: u64 = 10_000_000_000_000_000_000;
        let texts = numbers
            .iter()
            .filter(|&&n| n >= TWENTY_DIGITS)
            .map(u64::to_string)
            .collect();
        numbers.retain(|&n| n < TWENTY_DIGITS);
        ChannelIds { numbers, texts }
    }

    pub fn len(&self) -> usize {
        self.numbers.len() + self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids that are numbers, as numbers.
    pub fn numbers(&self) -> &[u64] {
        &self.numbers
    }

    /// Every other id.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }
}

impl FromIterator<String> for ChannelIds {
    fn from_iter<I: IntoIterator<Item = String>>(ids: I) -> Self {
        let mut channels = ChannelIds::default();
        for id in ids {
            match canonical_number(&id) {
                Some(n) => channels.numbers.push(n),
                None => channels.texts.push(id),
            }
        }
        channels
    }
}

impl<'a> FromIterator<&'a str> for ChannelIds {
    fn from_iter<I: IntoIterator<Item = &'a str>>(ids: I) -> Self {
        ids.into_iter().map(str::to_owned).collect()
    }
}

/// Every id as text: the numbers first, then the others.
impl IntoIterator for ChannelIds {
    type Item = String;
    type IntoIter = std::iter::Chain<
        std::iter::Map<std::vec::IntoIter<u64>, fn(u64) -> String>,
        std::vec::IntoIter<String>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        let text: fn(u64) -> String = |n| n.to_string();
        self.numbers.into_iter().map(text).chain(self.texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_colon() {
        assert_eq!(split_key("onebot:123"), Some(("onebot", "123")));
        assert_eq!(
            split_key("matrix:!room:server"),
            Some(("matrix", "!room:server"))
        );
        assert_eq!(split_key("123"), None);
        assert_eq!(split_key(":123"), None);
        assert_eq!(split_key("onebot:"), None);
    }

    #[test]
    fn canonical_numbers_are_exactly_the_ids_their_number_writes_back() {
        assert_eq!(canonical_number("0"), Some(0));
        assert_eq!(canonical_number("100001"), Some(100001));
        assert_eq!(
            canonical_number("9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for not_canonical in [
            "",
            "007",
            "00",
            "-1",
            "+5",
            "1e3",
            "0x3E9",
            " 1",
            "1 ",
            "12a",
            "١٢",
            "10000000000000000000",
            "18446744073709551615",
        ] {
            assert_eq!(canonical_number(not_canonical), None, "{not_canonical:?}");
        }
    }

    #[test]
    fn channel_lists_keep_numbers_as_numbers_and_give_back_every_id() {
        let ids = ["100001", "abc", "007", "42", "-1001234"];
        let channels: ChannelIds = ids.into_iter().collect();
        assert_eq!(channels.numbers(), [100001, 42]);
        assert_eq!(channels.texts(), ["abc", "007", "-1001234"]);
        assert_eq!(channels.len(), 5);
        let mut back: Vec<String> = channels.clone().into_iter().collect();
        back.sort();
        let mut expected: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(back, expected);
        assert_eq!(
            ChannelIds::from_numbers(vec![7, u64::MAX, 8]),
            ["7", "18446744073709551615", "8"]
                .into_iter()
                .collect::<ChannelIds>()
        );
        assert!(ChannelIds::default().is_empty());
    }
}
