// @ts-check
'use strict'
// A real Koishi 4.18 App on @minatojs/driver-sqlite (temp file) with mock bots that look like
// OneBot bots (platform 'onebot', a guild list, guild join/leave events), and helpers to send a
// group message to every bot in the group and see which bots answer.
// CommonJS on purpose: koishi 4.18's ESM entry does not load on Node 20.

const { App, Logger, Universal } = require('koishi')
const { MockBot } = require('@koishijs/plugin-mock')
const SQLiteDriver = require('@minatojs/driver-sqlite').default
const { join } = require('node:path')

const PLATFORM = 'onebot'

/**
 * MockBot hard-codes platform 'mock' (in the bot and in the sessions of its clients); this
 * subclass rewrites it to 'onebot' on every session it dispatches, and keeps a guild list.
 */
class OneBotMock extends MockBot {
  /** @param {any} ctx @param {{ selfId: string, guilds?: string[], guildPageSize?: number }} config */
  constructor(ctx, config) {
    super(ctx, config)
    this.platform = PLATFORM
    /** @type {Map<string, { id: string, name: string }>} */
    this.guilds = new Map()
    for (const id of config.guilds ?? []) this.guilds.set(id, { id, name: 'group ' + id })
    this.guildPageSize = config.guildPageSize ?? Infinity
    this.guildListCalls = 0
    /** @type {Map<string, any>} */
    this.clients = new Map()
  }

  /** @param {any} session */
  dispatch(session) {
    // MockBot sets its status (a login-updated event, which the plugin reports) inside its own
    // constructor, before this one makes the platform 'onebot': that event goes out once it has.
    if (this.platform !== PLATFORM) {
      Promise.resolve().then(() => this.dispatch(session))
      return
    }
    session.event.platform = PLATFORM
    if (session.event.login) session.event.login.platform = PLATFORM
    super.dispatch(session)
  }

  /** Satori `guild.list`, paged by `next`. @param {string} [next] */
  async getGuildList(next) {
    this.guildListCalls++
    const all = [...this.guilds.values()]
    const start = next ? +next : 0
    const end = Math.min(all.length, start + this.guildPageSize)
    const data = all.slice(start, end).map(g => ({ ...g }))
    return end < all.length ? { data, next: '' + end } : { data }
  }

  /** One cached client per (user, channel): each client() adds a permanent listener.
   * @param {string} userId @param {string} channelId */
  client(userId, channelId) {
    const key = userId + '/' + channelId
    let c = this.clients.get(key)
    if (!c) this.clients.set(key, c = super.client(userId, channelId))
    return c
  }

  /** @param {string} type @param {any} fields */
  emitEvent(type, fields) {
    const session = this.session({ type, ...fields })
    this.dispatch(session)
    return session
  }

  /** What koishi-plugin-adapter-onebot emits for group_increase of the bot itself. @param {string} guildId */
  joinGuild(guildId) {
    this.guilds.set(guildId, { id: guildId, name: 'group ' + guildId })
    return this.emitEvent('guild-added', {
      subtype: 'passive',
      guild: { id: guildId },
      channel: { id: guildId, type: Universal.Channel.Type.TEXT },
      user: { id: this.selfId },
    })
  }

  /** group_decrease of the bot itself: dispatched as guild-deleted (satori also emits guild-removed).
   * @param {string} guildId */
  leaveGuild(guildId) {
    this.guilds.delete(guildId)
    return this.emitEvent('guild-deleted', {
      subtype: 'active',
      guild: { id: guildId },
      channel: { id: guildId, type: Universal.Channel.Type.TEXT },
      user: { id: this.selfId },
    })
  }
}

/** Koishi's log records, captured instead of printed (KOISHI_LOG=1 prints them too). */
function captureLogs() {
  /** @type {{ type: string, name: string, content: string, timestamp: number }[]} */
  const records = []
  /** @type {((r: any) => void) | null} */
  let tap = null
  const print = !!process.env.KOISHI_LOG
  const saved = Logger.targets.slice()
  Logger.targets.splice(0, Logger.targets.length, {
    colors: 0,
    levels: { base: 2, 'auto-assign': 3, sqlite: 3 },
    record(/** @type {any} */ r) {
      if (tap) tap(r)
      if (r.name === 'sqlite' && r.type === 'debug') return
      records.push(r)
      if (print) console.log(`[koishi ${r.type}] ${r.name} ${r.content}`)
    },
  })
  return {
    records,
    restore: () => Logger.targets.splice(0, Logger.targets.length, ...saved),
    /** Run `fn` synchronously on every record, SQL statements of the sqlite driver included
     * ("> SELECT ..."): a test uses it to start a message at an exact point of a write. */
    tap: (/** @type {((r: any) => void) | null} */ fn) => { tap = fn },
  }
}

/**
 * `before`: plugins loaded before this one (e.g. plugin-admin), as [plugin, config] pairs.
 * @param {{ dir: string, bots: { selfId: string, guilds: string[], guildPageSize?: number }[],
 *   plugin: any, pluginConfig: any, appConfig?: any, before?: Array<[any, any]> }} opts
 */
async function createKoishi({ dir, bots, plugin, pluginConfig, appConfig = {}, before = [] }) {
  const app = new App({ autoAssign: false, ...appConfig })
  app.plugin(/** @type {any} */ (SQLiteDriver), { path: join(dir, 'koishi.db') })
  for (const [p, c] of before) app.plugin(p, c)
  // every bot that gets past Koishi's assignee check answers "pong:<selfId>"
  app.middleware((session) => 'pong:' + session.selfId)
  /** @type {Map<string, { bot: OneBotMock, fork: any }>} */
  const forks = new Map()
  /** @param {{ selfId: string, guilds: string[], guildPageSize?: number }} config */
  const addBot = (config) => {
    const fork = app.plugin(OneBotMock, config)
    const bot = /** @type {OneBotMock} */ (app.bots.find(b => b.selfId === config.selfId && b instanceof OneBotMock))
    forks.set(config.selfId, { bot, fork })
    return bot
  }
  for (const b of bots) addBot(b)
  const pluginFork = app.plugin(plugin, pluginConfig)
  await app.start()

  const k = {
    app,
    pluginFork,
    addBot,
    /** @param {string} id */
    bot: (id) => /** @type {OneBotMock} */ (forks.get(id)?.bot),
    /** Log the bot out (login-removed). @param {string} id */
    removeBot(id) {
      const e = forks.get(id)
      if (!e) return
      forks.delete(id)
      e.fork.dispose()
    },
    /**
     * One group message, delivered to every ONLINE bot that is in the group (as a real group
     * message reaches each bot's connection). Resolves with the bots that answered.
     * One sender per group: the first message of a user creates its user row, and Koishi's
     * concurrent first messages of one user in several groups race on that INSERT.
     * @param {string} group @param {string} [userId]
     */
    async whoAnswers(group, userId = 'u' + group) {
      const recipients = [...forks.values()].map(e => e.bot)
        .filter(b => b.guilds.has(group) && b.status === Universal.Status.ONLINE)
      const replies = await Promise.all(recipients.map(b => b.client(userId, group).receive('ping')))
      return recipients.filter((_, i) => replies[i].length).map(b => b.selfId).sort()
    },
    /**
     * One group message from `userId`, delivered to `bots` (default: every online bot in the
     * group), each getting its own session with its own message id, as OneBot accounts do.
     * `timestamp`: the message's time for every copy (OneBot's `time`, the same for every
     * recipient); without it each session gets the time it is created. `content` may depend on
     * the receiving bot (an image URL signed per account). Resolves when Koishi has handled
     * every copy (a bot's own message is not handled by Koishi: not waited for).
     * @param {string} group @param {string} userId @param {string | ((bot: string) => string)} content
     * @param {{ bots?: string[], timestamp?: number }} [opts]
     */
    async deliver(group, userId, content, { bots, timestamp } = {}) {
      const recipients = bots
        ? bots.map(id => k.bot(id))
        : [...forks.values()].map(e => e.bot).filter(b => b.guilds.has(group) && b.status === Universal.Status.ONLINE)
      await Promise.all(recipients.map((b) => {
        const client = b.client(userId, group)
        if (timestamp !== undefined) client.event.timestamp = timestamp
        // receive() copies client.event synchronously
        const done = client.receive(typeof content === 'function' ? content(b.selfId) : content)
        delete client.event.timestamp
        return userId === b.selfId ? undefined : done
      }))
    },
    /**
     * One group message from `user`, delivered to every online bot in the group through Koishi's
     * own message handling. Resolves with each recipient's replies, the test middleware's
     * "pong" left out.
     * @param {string} group @param {string} user @param {string} content
     * @returns {Promise<Record<string, string[]>>}
     */
    async ask(group, user, content) {
      const recipients = [...forks.values()].map(e => e.bot)
        .filter(b => b.guilds.has(group) && b.status === Universal.Status.ONLINE)
      const replies = await Promise.all(recipients.map(b => b.client(user, group).receive(content)))
      return Object.fromEntries(recipients.map((b, i) => [b.selfId, replies[i].filter((/** @type {string} */ r) => !/^pong:/.test(r))]))
    },
    /** @param {string[]} groups @returns {Promise<Record<string, string[]>>} */
    async answers(groups) {
      const r = await Promise.all(groups.map(g => k.whoAnswers(g)))
      return Object.fromEntries(groups.map((g, i) => [g, r[i]]))
    },
    /** @param {string} platform */
    async rows(platform = PLATFORM) {
      return app.database.get('channel', { platform })
    },
    async stop() {
      for (const id of [...forks.keys()]) k.removeBot(id)
      await app.stop()
    },
  }
  return k
}

/**
 * Poll until fn() is truthy; resolves with that value.
 * @template T @param {() => T | Promise<T>} fn @param {number} [timeout] @param {string} [what]
 * @returns {Promise<Exclude<T, null | undefined | false | 0 | ''>>}
 */
async function waitFor(fn, timeout = 5000, what = 'condition') {
  const start = Date.now()
  for (;;) {
    const v = await fn()
    if (v) return /** @type {any} */ (v)
    if (Date.now() - start > timeout) throw new Error(`waitFor timed out after ${timeout} ms: ${what}`)
    await new Promise(r => setTimeout(r, 10))
  }
}

const sleep = (/** @type {number} */ ms) => new Promise(r => setTimeout(r, ms))

/**
 * The one bot that replied, and its replies (a command answered once: by one bot).
 * @param {Record<string, string[]>} replies @returns {{ bot: string, texts: string[] }}
 */
function oneBot(replies) {
  const who = Object.entries(replies).filter(([, r]) => r.length)
  if (who.length !== 1) throw new Error(`exactly one bot replies: ${JSON.stringify(replies)}`)
  return { bot: who[0][0], texts: who[0][1] }
}

/** `{name}` placeholders of a locale string filled in. @param {string} template @param {Record<string, unknown>} params */
const fill = (template, params) => template.replace(/\{(\w+)\}/g, (_, k) => String(params[k]))

module.exports = { OneBotMock, captureLogs, createKoishi, waitFor, sleep, oneBot, fill, PLATFORM, Universal }
