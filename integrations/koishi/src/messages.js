// @ts-check
'use strict'
// Counting group messages for the service's `balanceBy: messages`: how many messages each
// channel received, each message counted ONCE however many of this Koishi's bots received it.
//
// How copies of one message are recognised. Every bot in a group gets its own session for the
// same message. The message id cannot tell them apart: on OneBot (NapCat, Lagrange, LLOneBot)
// `message_id` is an id of the receiving account's own message store, a different number for
// every account that received the message (and Koishi's mock bots do the same). What is the
// same for every recipient is the group, the sender, the content and the time the QQ server
// gave the message (OneBot's `time`, in seconds, which the adapter turns into
// `session.timestamp`). So a copy is recognised by
//
//   platform + channel + sender + content (normalised) + timestamp within TIME_TOLERANCE,
//
// the same signature the service uses for the messages its own OneBot connections deliver.
// The content is normalised: element attributes are dropped (`<img src="…"/>` → `<img/>`),
// because image URLs (NapCat's per-account `rkey`), quoted message ids and mention names
// differ between accounts while the message is the same; whitespace runs become one space.
//
// A user may send the same text twice within the tolerance ("+1", "?"): those are two
// messages with the same signature. A signature therefore does not stand for one message but
// for as many as a single bot delivered: each copy matches an earlier message of that
// signature which *this bot* has not delivered yet, or else it is a new message. Two bots each
// receiving "?" twice count 2, not 1 and not 4.
//
// Memory is bounded whatever the groups send: at most MAX_RECENT messages are remembered (for
// WINDOW, the oldest are forgotten first), at most MAX_CHANNELS channels are pending (messages
// of further channels are dropped, and counted as dropped), and a channel's pending count
// stops at MAX_COUNT (what the service accepts in one report).

const { createHash } = require('node:crypto')

/** How long a message is remembered, so that copies delivered later by other bots are not counted again. */
const WINDOW = 60_000
/** Copies of one message differ in timestamp by at most this much (OneBot: 0; adapters that
 * stamp the receipt time: the bots' delivery skew). */
const TIME_TOLERANCE = 10_000
/** Messages remembered for deduplication, at most. */
const MAX_RECENT = 50_000
/** Channels with pending counts, at most (a report of them all stays far below the service's body limit). */
const MAX_CHANNELS = 20_000
/** The most messages one channel may have in one report (the service refuses more). */
const MAX_COUNT = 1_000_000
/** Channels per `messages` event. */
const CHANNELS_PER_EVENT = 5_000

/**
 * @typedef {{ t: number, at: number, bots: string[] }} Recent
 * one message: its timestamp, when it was first seen here, which bots delivered it
 */

/** Pending counts: platform → channel → messages. @typedef {Map<string, Map<string, number>>} Counts */

/**
 * Element attributes dropped, whitespace collapsed: the same for every recipient of a message.
 * @param {string} content
 */
function normalize(content) {
  return content
    .replace(/<(\/?)([A-Za-z][^\s/>]*)(?:\s[^>]*?)?(\/?)>/g, '<$1$2$3>')
    .replace(/\s+/g, ' ')
    .trim()
}

/**
 * Whether the service accepts `id` as a channel id: 1 to 255 bytes, no control character.
 * @param {string} id
 */
function validChannel(id) {
  // eslint-disable-next-line no-control-regex
  return id.length > 0 && Buffer.byteLength(id) <= 255 && !/[\u0000-\u001f\u007f-\u009f]/.test(id)
}

class MessageCounter {
  /**
   * @param {{ window?: number, tolerance?: number, maxRecent?: number, maxChannels?: number,
   *   now?: () => number }} [options]
   */
  constructor(options = {}) {
    this.window = options.window ?? WINDOW
    this.tolerance = options.tolerance ?? TIME_TOLERANCE
    this.maxRecent = options.maxRecent ?? MAX_RECENT
    this.maxChannels = options.maxChannels ?? MAX_CHANNELS
    this.now = options.now ?? Date.now
    /** signature → messages of that signature still remembered @type {Map<string, Recent[]>} */
    this.recent = new Map()
    /** every remembered message, oldest first (from `head` on) @type {Array<[string, Recent]>} */
    this.order = []
    this.head = 0
    /** @type {Counts} */
    this.pending = new Map()
    /** channels in `pending` */
    this.channels = 0
    /** messages not counted because MAX_CHANNELS channels were pending already */
    this.dropped = 0
  }

  /** Messages remembered now. */
  get remembered() {
    return this.order.length - this.head
  }

  /**
   * One bot received one group message. Returns whether it is a new message and pending was
   * empty before (the caller then makes sure a report is scheduled).
   * @param {string} platform @param {string} channel @param {string} bot the receiving bot
   * @param {string} user the sender @param {string} content @param {number} timestamp ms
   */
  seen(platform, channel, bot, user, content, timestamp) {
    const now = this.now()
    this.expire(now)
    const signature = createHash('sha1')
      .update(platform).update('\0').update(channel).update('\0').update(user).update('\0')
      .update(normalize(content))
      .digest('base64')
    let list = this.recent.get(signature)
    if (list) {
      for (const m of list) {
        if (!m.bots.includes(bot) && Math.abs(m.t - timestamp) <= this.tolerance) {
          m.bots.push(bot) // a copy of a message counted already
          return false
        }
      }
    } else {
      this.recent.set(signature, list = [])
    }
    const m = { t: timestamp, at: now, bots: [bot] }
    list.push(m)
    this.order.push([signature, m])
    if (this.remembered > this.maxRecent) this.forgetOldest()
    const wasEmpty = this.channels === 0
    return this.add(platform, channel, 1) && wasEmpty
  }

  /** @param {number} now */
  expire(now) {
    while (this.head < this.order.length && this.order[this.head][1].at <= now - this.window) this.forgetOldest()
  }

  forgetOldest() {
    const [signature, m] = this.order[this.head]
    this.head++
    const list = this.recent.get(signature)
    if (list) {
      const i = list.indexOf(m)
      if (i >= 0) list.splice(i, 1)
      if (!list.length) this.recent.delete(signature)
    }
    // compact now and then: the array does not grow past twice what it holds
    if (this.head > 1024 && this.head * 2 > this.order.length) {
      this.order = this.order.slice(this.head)
      this.head = 0
    }
  }

  /**
   * Adds `n` messages to a channel's pending count (saturating at MAX_COUNT). A channel not
   * pending yet is dropped when MAX_CHANNELS are pending. Returns whether it was counted.
   * @param {string} platform @param {string} channel @param {number} n
   */
  add(platform, channel, n) {
    let counts = this.pending.get(platform)
    const had = counts?.get(channel)
    if (had === undefined) {
      if (this.channels >= this.maxChannels) {
        this.dropped += n
        return false
      }
      if (!counts) this.pending.set(platform, counts = new Map())
      this.channels++
    }
    /** @type {Map<string, number>} */ (counts).set(channel, Math.min(MAX_COUNT, (had ?? 0) + n))
    return true
  }

  /** Whether any count is pending. */
  get size() {
    return this.channels
  }

  /** The pending counts, which are then no longer pending (or null if none). @returns {Counts | null} */
  take() {
    if (!this.channels) return null
    const taken = this.pending
    this.pending = new Map()
    this.channels = 0
    return taken
  }

  /**
   * Counts taken for a report that did not reach the service: pending again, before the
   * messages counted since (which are dropped first if MAX_CHANNELS is reached).
   * @param {Counts} taken
   */
  restore(taken) {
    const since = this.pending
    this.pending = new Map()
    this.channels = 0
    for (const counts of [taken, since]) {
      for (const [platform, channels] of counts) {
        for (const [channel, n] of channels) this.add(platform, channel, n)
      }
    }
  }

  /** How many messages and channels `counts` holds. @param {Counts} counts */
  static total(counts) {
    let messages = 0
    let channels = 0
    for (const m of counts.values()) {
      channels += m.size
      for (const n of m.values()) messages += n
    }
    return { messages, channels }
  }

  /**
   * The service's `messages` events for `counts`: one per platform (more for huge ones).
   * @param {Counts} counts
   * @returns {Array<{ type: 'messages', platform: string, counts: Record<string, number> }>}
   */
  static events(counts) {
    /** @type {Array<{ type: 'messages', platform: string, counts: Record<string, number> }>} */
    const events = []
    for (const [platform, channels] of counts) {
      // no prototype: a channel named "__proto__" is an ordinary key
      /** @type {Record<string, number>} */
      let chunk = Object.create(null)
      let size = 0
      for (const [channel, n] of channels) {
        if (n <= 0) continue
        chunk[channel] = n
        if (++size >= CHANNELS_PER_EVENT) {
          events.push({ type: 'messages', platform, counts: chunk })
          chunk = Object.create(null)
          size = 0
        }
      }
      if (size) events.push({ type: 'messages', platform, counts: chunk })
    }
    return events
  }
}

module.exports = {
  MessageCounter, normalize, validChannel, WINDOW, TIME_TOLERANCE, MAX_RECENT, MAX_CHANNELS, MAX_COUNT,
}
