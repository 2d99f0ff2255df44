//! Identifiers shared by every module.
//!
//! Ids are strings exactly as the platform reports them (OneBot: decimal QQ and group numbers).
//! A *key* joins a platform and an id as `platform:id`, the form Koishi and the plugin's config
//! use; the platform is everything before the first `:`, so ids may themselves contain `:`.

/// Splits `platform:id` at the first `:`; `None` for a short id (no `:`) or an empty side.
pub fn split_key(key: &str) -> Option<(&str, &str)> {
    let (platform, id) = key.split_once(':')?;
    (!platform.is_empty() && !id.is_empty()).then_some((platform, id))
}

/// Dense index of a bot within one platform of the [`crate::index::FleetIndex`].
pub type BotIx = u32;
/// Dense index of a channel within one platform of the [`crate::index::FleetIndex`].
pub type ChanIx = u32;

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
}
