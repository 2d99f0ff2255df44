// @ts-check
'use strict'
// The fleet source: tells the service which bots this Koishi has, whether each is online, and
// which groups each is in (PUT the full state, then events, heartbeats; 409 → PUT again), and
// how many messages each group received (`messages` events, with the other events or in place
// of a heartbeat, at most every `messageReportInterval`).

const { Universal } = require('koishi')
const { HttpError, Once, Sleeper, backoff, describe, isOutage, request } = require('./client')
const { MessageCounter, validChannel } = require('./messages')

/** @typedef {import('koishi').Context} Context */
/** @typedef {import('koishi').Bot} Bot */
/** @typedef {import('./client').Link} Link */
/** @typedef {import('./client').ClientOptions} ClientOptions */

/**
 * @typedef {{ type: 'online', platform: string, id: string, channels: string[] }
 *   | { type: 'offline', platform: string, id: string }
 *   | { type: 'joined' | 'left', platform: string, id: string, channel: string }
 *   | { type: 'messages', platform: string, counts: Record<string, number> }} FleetEvent
 */

/**
 * What the service knows (or will know once the queue is sent) about one bot.
 * @typedef {object} BotState
 * @property {string} platform
 * @property {string} id
 * @property {boolean} online  reported online, with `channels`
 * @property {Set<string>} channels
 * @property {number} epoch  bumped by every status change; a guild-list fetch of an older epoch is dropped
 * @property {null | Array<['+' | '-', string]>} pending  joins/leaves seen while the guild list is being fetched
 */

/** Events per POST (the service's body limit is 16 MiB by default: far more than this). */
const EVENTS_PER_REQUEST = 1000
/** Pages of one guild list at most (a broken adapter repeating `next` must not loop forever). */
const MAX_PAGES = 10000

class Reporter {
  /**
   * @param {Context} ctx
   * @param {ClientOptions & { reporter: string, heartbeatInterval: number, retryMin: number, retryMax: number,
   *   messageReportInterval?: number }} config  messageReportInterval in seconds, 0: no message counts
   * @param {Link} link
   */
  constructor(ctx, config, link) {
    this.ctx = ctx
    this.config = config
    this.link = link
    /** @type {import('koishi').Logger} */
    this.logger = ctx.logger('auto-assign')
    this.path = '/v1/fleet/reporters/' + encodeURIComponent(config.reporter)
    /** @type {Map<string, BotState>} */
    this.bots = new Map()
    /** @type {FleetEvent[]} */
    this.queue = []
    /** the service does not know our state: PUT it (first contact, 409, after a failure) */
    this.needsFull = true
    this.heartbeatDue = false
    this.started = false
    this.disposed = false
    this.abort = new AbortController()
    this.sleeper = new Sleeper()
    link.sleepers.add(this.sleeper)
    /** @type {Promise<void> | undefined} */
    this.loop = undefined
    this.refused = new Once(message => this.logger.error('fleet report refused: %s', message))
    /** ms between two message reports; 0: messages are not counted */
    this.messageInterval = Math.max(0, (config.messageReportInterval ?? 0) * 1000)
    this.messages = this.messageInterval > 0 ? new MessageCounter() : null
    /** when message counts last went out */
    this.messagesSentAt = 0
    /** Called after each full state the service took (its first, after a 409, after an outage).
     * @type {Set<() => void>} */
    this.reported = new Set()
  }

  /** Report every bot Koishi has now, then follow events. Call on `ready`. */
  async start() {
    const initial = []
    for (const bot of this.ctx.bots) {
      if (!bot.platform || !bot.selfId) continue
      const s = this.state(bot.platform, bot.selfId)
      if (bot.status === Universal.Status.ONLINE) initial.push(this.goOnline(bot, s))
    }
    // The first PUT waits for the guild lists, so the first plan sees every group.
    await Promise.all(initial)
    if (this.disposed) return
    this.started = true
    this.loop = this.run()
  }

  // ---- Koishi events ------------------------------------------------------------------

  /** login-added / login-updated: the bot is there; report its status. @param {Bot} bot */
  onLogin(bot) {
    if (!bot.platform || !bot.selfId) return
    const s = this.state(bot.platform, bot.selfId)
    if (bot.status === Universal.Status.ONLINE) this.goOnline(bot, s)
    else this.goOffline(s)
  }

  /** login-removed: the bot is gone. @param {Bot} bot */
  onLogout(bot) {
    if (!bot.platform || !bot.selfId) return
    const s = this.bots.get(key(bot.platform, bot.selfId))
    if (!s) return
    this.goOffline(s)
    this.bots.delete(key(bot.platform, bot.selfId))
  }

  /** The bot itself joined (`+`) or left (`-`) a guild. Idempotent: satori emits some events
   * under two names. @param {Bot} bot @param {'+' | '-'} op @param {string} guildId */
  onGuild(bot, op, guildId) {
    if (!bot.platform || !bot.selfId || !guildId) return
    const s = this.bots.get(key(bot.platform, bot.selfId))
    if (!s) return
    if (s.pending) {
      s.pending.push([op, guildId])
      return
    }
    if (!s.online) return // an offline bot's list is fetched again when it comes online
    if (op === '+' ? s.channels.has(guildId) : !s.channels.has(guildId)) return
    if (op === '+') s.channels.add(guildId)
    else s.channels.delete(guildId)
    this.send({ type: op === '+' ? 'joined' : 'left', platform: s.platform, id: s.id, channel: guildId })
  }

  /**
   * A message Koishi received. Counted if it is a group message, received by a bot this plugin
   * reports, and not sent by one of them: a bot's own messages (OneBot's `message_sent` echo,
   * or one of our bots' replies as another of our bots receives it) are what this Koishi says,
   * not traffic it has to answer, and counting a reply only where a second bot of ours happens
   * to be in the group would make the weight depend on the fleet. Counted by the guild id: the
   * id reported as the channel (on OneBot the group number, the same as the channel id).
   *
   * Counted by the process that answers it, so that several processes in one group count
   * each message once: not when the group's assignee is a bot of another process (that
   * process counts it), nor when it is a bot of ours that is offline (nobody here answers; a
   * claim elsewhere, or the assignee the service picks next, counts it). Unassigned groups
   * are counted.
   * @param {import('koishi').Session} session
   * @param {string | undefined} assignee the group's assignee as the stream last said ('' or
   *   undefined: none)
   */
  onMessage(session, assignee) {
    if (!this.messages || this.disposed) return
    const platform = session.platform
    const bot = session.selfId
    if (!platform || !bot || !this.bots.has(key(platform, bot))) return
    if (session.isDirect) return
    const channel = session.guildId
    if (!channel || !validChannel(channel)) return
    if (assignee && !this.bots.get(key(platform, assignee))?.online) return
    const user = session.userId ?? ''
    if (user && this.bots.has(key(platform, user))) return
    const timestamp = typeof session.timestamp === 'number' && Number.isFinite(session.timestamp) ? session.timestamp : Date.now()
    // The first count after a report: the loop may be sleeping until the next heartbeat.
    if (this.messages.seen(platform, channel, bot, user, session.content ?? '', timestamp)) this.sleeper.wake()
  }

  /**
   * This Koishi's bots that are online and, as far as this reporter knows (guild lists, joins
   * and leaves), in `channel`.
   * @param {string} platform @param {string} channel @returns {string[]}
   */
  membersOf(platform, channel) {
    /** @type {string[]} */
    const ids = []
    for (const s of this.bots.values()) {
      if (s.platform === platform && s.online && s.channels.has(channel)) ids.push(s.id)
    }
    return ids
  }

  /** The service may have forgotten us (the stream reconnected): heartbeat now; 409 → PUT. */
  probe() {
    this.heartbeatDue = true
    this.sleeper.wake()
  }

  // ---- bot state ----------------------------------------------------------------------

  /** @param {string} platform @param {string} id */
  state(platform, id) {
    const k = key(platform, id)
    let s = this.bots.get(k)
    if (!s) this.bots.set(k, s = { platform, id, online: false, channels: new Set(), epoch: 0, pending: null })
    return s
  }

  /** @param {Bot} bot @param {BotState} s */
  async goOnline(bot, s) {
    if (s.online || s.pending) return
    const epoch = ++s.epoch
    s.pending = []
    const guilds = await this.listGuilds(bot)
    if (s.epoch !== epoch || this.disposed) return
    const channels = new Set(guilds)
    for (const [op, id] of s.pending) op === '+' ? channels.add(id) : channels.delete(id)
    s.pending = null
    s.channels = channels
    s.online = true
    this.send({ type: 'online', platform: s.platform, id: s.id, channels: [...channels] })
  }

  /** @param {BotState} s */
  goOffline(s) {
    s.epoch++
    s.pending = null
    if (!s.online) return
    s.online = false
    s.channels = new Set()
    this.send({ type: 'offline', platform: s.platform, id: s.id })
  }

  /**
   * Every guild id of the bot, all pages. A bot that cannot list its guilds is reported with
   * none (it still gets the groups it joins later); a failing list is retried twice.
   * @param {Bot} bot @returns {Promise<string[]>}
   */
  async listGuilds(bot) {
    if (typeof bot.getGuildList !== 'function') {
      this.logger.warn('bot %s:%s cannot list its guilds (no getGuildList); reporting it in no group', bot.platform, bot.selfId)
      return []
    }
    for (let attempt = 0; ; attempt++) {
      try {
        /** @type {string[]} */
        const ids = []
        /** @type {string | undefined} */
        let next
        for (let page = 0; page < MAX_PAGES; page++) {
          const list = await withTimeout(bot.getGuildList(next), this.config.requestTimeout, 'getGuildList')
          for (const guild of list?.data ?? []) if (guild?.id) ids.push('' + guild.id)
          if (!list?.next || list.next === next) break
          next = list.next
        }
        return [...new Set(ids)]
      } catch (e) {
        const notImplemented = /not implemented/i.test(String(e))
        if (notImplemented || attempt >= 2 || this.disposed) {
          this.logger.warn('bot %s:%s: getGuildList failed (%s); reporting it in no group', bot.platform, bot.selfId, describe(e))
          return []
        }
        await this.sleeper.sleep(1000 * (attempt + 1))
      }
    }
  }

  // ---- sending ------------------------------------------------------------------------

  /** @param {FleetEvent} event */
  send(event) {
    if (this.needsFull) return // the next PUT carries it
    this.queue.push(event)
    this.sleeper.wake()
  }

  fullState() {
    return {
      bots: [...this.bots.values()].map(s => ({
        platform: s.platform, id: s.id, online: s.online, channels: s.online ? [...s.channels] : [],
      })),
    }
  }

  async run() {
    let attempt = 0
    let lastSent = 0
    while (!this.disposed) {
      const now = Date.now()
      const messagesAt = this.messagesAt()
      if (!this.needsFull && !this.queue.length && !this.heartbeatDue && now < messagesAt) {
        // Any request counts as a heartbeat; one is due `heartbeatInterval` after the last.
        const wait = Math.min(lastSent + this.config.heartbeatInterval, messagesAt) - now
        if (wait > 0) {
          await this.sleeper.sleep(wait)
          continue
        }
        this.heartbeatDue = true
      }
      try {
        await this.flushOnce()
        lastSent = Date.now()
        attempt = 0
        this.refused.clear()
        this.link.ok()
      } catch (e) {
        if (this.disposed) break
        // Whatever got lost, the service hears the full state next.
        this.needsFull = true
        this.queue = []
        if (isOutage(e)) this.link.fail(e)
        else this.refused.say(describe(e))
        await this.sleeper.sleep(backoff(attempt++, this.config.retryMin, this.config.retryMax))
      }
    }
  }

  /** When the pending message counts may go out (Infinity: none pending). */
  messagesAt() {
    if (!this.messages?.size) return Infinity
    return this.messagesSentAt + this.messageInterval
  }

  async flushOnce() {
    const signal = this.abort.signal
    if (this.needsFull) {
      // Events from now on go to the queue and are sent after this state. Message counts are
      // not part of the state: they stay pending and follow in the next request.
      this.needsFull = false
      this.queue = []
      this.heartbeatDue = false
      const state = this.fullState()
      await request(this.config, 'PUT', this.path, state, signal)
      this.logger.debug('reported %d bot(s) to the service', state.bots.length)
      for (const f of this.reported) f()
      return
    }
    // Message counts ride along with the fleet events, or replace the heartbeat.
    const taken = Date.now() >= this.messagesAt() ? this.messages?.take() ?? null : null
    if (this.queue.length || taken) {
      const fleet = this.queue.splice(0, EVENTS_PER_REQUEST)
      /** @type {FleetEvent[]} */
      const events = taken ? [...fleet, ...MessageCounter.events(taken)] : fleet
      this.heartbeatDue = false
      if (taken) this.messagesSentAt = Date.now()
      try {
        await request(this.config, 'POST', this.path + '/events', { events }, signal)
      } catch (e) {
        if (taken) this.unsent(taken, e, fleet.length > 0)
        if (e instanceof HttpError && e.status === 409) return this.conflict()
        throw e
      }
      if (taken) {
        const { messages, channels } = MessageCounter.total(taken)
        this.logger.debug('reported %d message(s) in %d channel(s)', messages, channels)
      }
      return
    }
    this.heartbeatDue = false
    try {
      await request(this.config, 'POST', this.path + '/heartbeat', {}, signal)
    } catch (e) {
      if (e instanceof HttpError && e.status === 409) return this.conflict()
      throw e
    }
  }

  /**
   * Message counts whose request failed. They are kept, and sent with the next request that
   * can carry them (after the PUT that a 409 or a failure calls for), except when the service
   * refused a request that carried nothing else: the same counts would be refused again.
   *
   * * 409: the service checks the reporter before it applies any event of a request, so none
   *   of these counts was added: sending them again counts them exactly once. A 409 loop
   *   (PUT, then 409 again) cannot add them twice either.
   * * No answer (connection lost, timeout, 5xx): the service may or may not have added them.
   *   Sending them again counts them twice in the rare case it had (a request that timed out
   *   after the service applied it); dropping them would lose them in the common case (the
   *   service down, or restarting). A weight is a day-long average, so one report too many
   *   after an outage is the smaller error.
   * @param {import('./messages').Counts} taken @param {unknown} e @param {boolean} withFleet
   */
  unsent(taken, e, withFleet) {
    const { messages, channels } = MessageCounter.total(taken)
    const refused = e instanceof HttpError && e.status !== 409 && !isOutage(e)
    if (refused && !withFleet) {
      this.logger.warn('the service refused the counts of %d message(s) in %d channel(s); dropped: %s', messages, channels, describe(e))
      return
    }
    /** @type {MessageCounter} */ (this.messages).restore(taken)
    // the next request may carry them again at once
    this.messagesSentAt = 0
    this.logger.debug('counts of %d message(s) in %d channel(s) not delivered (%s): kept for the next report', messages, channels, describe(e))
  }

  conflict() {
    this.logger.info('the service does not know reporter %s (restarted, or silent too long): reporting the full state', this.config.reporter)
    this.needsFull = true
    this.queue = []
  }

  /** Stop, then tell the service our bots are gone (DELETE), without waiting for the grace period. */
  async dispose() {
    this.disposed = true
    this.link.sleepers.delete(this.sleeper)
    this.sleeper.stop()
    this.abort.abort()
    const loop = this.loop
    // a request in flight ends within requestTimeout
    if (loop) await loop.catch(() => {})
    if (!this.started) return
    const quick = { ...this.config, requestTimeout: Math.min(this.config.requestTimeout, 3000) }
    // The last counts, before the reporter is gone (the service keeps them: they are the
    // channels', not the reporter's).
    const taken = this.needsFull ? null : this.messages?.take()
    if (taken) {
      try {
        await request(quick, 'POST', this.path + '/events', { events: MessageCounter.events(taken) })
        const { messages, channels } = MessageCounter.total(taken)
        this.logger.debug('reported %d message(s) in %d channel(s) before stopping', messages, channels)
      } catch (e) {
        this.logger.debug('last message counts not delivered: %s', describe(e))
      }
    }
    try {
      await request(quick, 'DELETE', this.path)
    } catch (e) {
      this.logger.debug('DELETE %s failed: %s', this.path, describe(e))
    }
  }
}

/** @param {string} platform @param {string} id */
function key(platform, id) {
  return platform + ':' + id
}

/**
 * @template T @param {Promise<T>} promise @param {number} ms @param {string} what
 * @returns {Promise<T>}
 */
function withTimeout(promise, ms, what) {
  /** @type {NodeJS.Timeout | undefined} */
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms)
  })
  return /** @type {Promise<T>} */ (Promise.race([promise, timeout]).finally(() => clearTimeout(timer)))
}

module.exports = { Reporter }
