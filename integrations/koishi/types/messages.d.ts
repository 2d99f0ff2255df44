/**
 * one message: its timestamp, when it was first seen here, which bots delivered it
 */
export type Recent = {
    t: number;
    at: number;
    bots: string[];
};
/**
 * Pending counts: platform → channel → messages.
 */
export type Counts = Map<string, Map<string, number>>;
export class MessageCounter {
    /** How many messages and channels `counts` holds. @param {Counts} counts */
    static total(counts: Counts): {
        messages: number;
        channels: number;
    };
    /**
     * The service's `messages` events for `counts`: one per platform (more for huge ones).
     * @param {Counts} counts
     * @returns {Array<{ type: 'messages', platform: string, counts: Record<string, number> }>}
     */
    static events(counts: Counts): Array<{
        type: "messages";
        platform: string;
        counts: Record<string, number>;
    }>;
    /**
     * @param {{ window?: number, tolerance?: number, maxRecent?: number, maxChannels?: number,
     *   now?: () => number }} [options]
     */
    constructor(options?: {
        window?: number;
        tolerance?: number;
        maxRecent?: number;
        maxChannels?: number;
        now?: () => number;
    });
    window: number;
    tolerance: number;
    maxRecent: number;
    maxChannels: number;
    now: () => number;
    /** signature → messages of that signature still remembered @type {Map<string, Recent[]>} */
    recent: Map<string, Recent[]>;
    /** every remembered message, oldest first (from `head` on) @type {Array<[string, Recent]>} */
    order: Array<[string, Recent]>;
    head: number;
    /** @type {Counts} */
    pending: Counts;
    /** channels in `pending` */
    channels: number;
    /** messages not counted because MAX_CHANNELS channels were pending already */
    dropped: number;
    /** Messages remembered now. */
    get remembered(): number;
    /**
     * One bot received one group message. Returns whether it is a new message and pending was
     * empty before (the caller then makes sure a report is scheduled).
     * @param {string} platform @param {string} channel @param {string} bot the receiving bot
     * @param {string} user the sender @param {string} content @param {number} timestamp ms
     */
    seen(platform: string, channel: string, bot: string, user: string, content: string, timestamp: number): boolean;
    /** @param {number} now */
    expire(now: number): void;
    forgetOldest(): void;
    /**
     * Adds `n` messages to a channel's pending count (saturating at MAX_COUNT). A channel not
     * pending yet is dropped when MAX_CHANNELS are pending. Returns whether it was counted.
     * @param {string} platform @param {string} channel @param {number} n
     */
    add(platform: string, channel: string, n: number): boolean;
    /** Whether any count is pending. */
    get size(): number;
    /** The pending counts, which are then no longer pending (or null if none). @returns {Counts | null} */
    take(): Counts | null;
    /**
     * Counts taken for a report that did not reach the service: pending again, before the
     * messages counted since (which are dropped first if MAX_CHANNELS is reached).
     * @param {Counts} taken
     */
    restore(taken: Counts): void;
}
/**
 * @typedef {{ t: number, at: number, bots: string[] }} Recent
 * one message: its timestamp, when it was first seen here, which bots delivered it
 */
/** Pending counts: platform → channel → messages. @typedef {Map<string, Map<string, number>>} Counts */
/**
 * Element attributes dropped, whitespace collapsed: the same for every recipient of a message.
 * @param {string} content
 */
export function normalize(content: string): string;
/**
 * Whether the service accepts `id` as a channel id: 1 to 255 bytes, no control character.
 * @param {string} id
 */
export function validChannel(id: string): boolean;
/** How long a message is remembered, so that copies delivered later by other bots are not counted again. */
export const WINDOW: 60000;
/** Copies of one message differ in timestamp by at most this much (OneBot: 0; adapters that
 * stamp the receipt time: the bots' delivery skew). */
export const TIME_TOLERANCE: 10000;
/** Messages remembered for deduplication, at most. */
export const MAX_RECENT: 50000;
/** Channels with pending counts, at most (a report of them all stays far below the service's body limit). */
export const MAX_CHANNELS: 20000;
/** The most messages one channel may have in one report (the service refuses more). */
export const MAX_COUNT: 1000000;
