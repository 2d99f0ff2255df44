// @ts-check
'use strict'
// Chat commands: ask the auto-assign service who answers in a group and why, how the fleet
// stands, and steer it (pins, holds, drains, a rebalance or its dry run). Every reply goes
// through Koishi's i18n (locales/*.json), in the user's or channel's locale, Chinese first.
//
//   auto-assign                 分配              the list of commands                 readAuthority
//   auto-assign.explain [g]     分配.谁           who answers in group g and why       readAuthority
//   auto-assign.status          分配.状态         service reachable, loads, last run   readAuthority
//   auto-assign.pins            分配.固定列表     the pins and holds in force          readAuthority
//   auto-assign.drains          分配.排空列表     the drained bots                     readAuthority
//   auto-assign.preview         分配.预演         what a rebalance would move (dry)    readAuthority
//   auto-assign.rebalance [-n]  分配.重新分配     a rebalance now (-n: the dry run)    changeAuthority (-n: readAuthority)
//   auto-assign.pin [bot]       分配.固定         pin a group to a bot                 changeAuthority
//   auto-assign.hold [g]        分配.保持空       hold a group with no assignee        changeAuthority
//   auto-assign.unpin [g]       分配.取消固定     end a pin or a hold                  changeAuthority
//   auto-assign.drain <bot>     分配.排空         drain a bot                          changeAuthority
//   auto-assign.undrain <bot>   分配.恢复         end a drain                          changeAuthority
//
// In a group a command is answered once, by one bot: see `designated`. Koishi's own `assign`
// (plugin-admin) is src/assign.js.

const { Universal } = require('koishi')
const { HttpError, NetworkError } = require('./client')
const { serviceClient, lastRun, planned, pinPath, drainPath, parseBot, authorNote, refusal, failure, untilAndNote } = require('./operator')

/** @typedef {import('koishi').Context} Context */
/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./applier').Applier} Applier */
/** @typedef {import('./reporter').Reporter} Reporter */

/**
 * @typedef {object} CommandOptions
 * @property {string} endpoint
 * @property {string} [token]
 * @property {import('./client').Fetch} [fetch]  requests with the plugin's caFile (default: the global fetch)
 * @property {number} requestTimeout  ms
 * @property {number} readAuthority  explain, status, pins, drains, preview (and the root command)
 * @property {number} changeAuthority  rebalance, pin, hold, unpin, drain, undrain
 */

/** Reasons `GET /v1/explain` gives (others are shown as the service names them). */
const REASONS = new Set(['operator_pin', 'held', 'pinned', 'excluded', 'only_member', 'balanced', 'no_valid_bot',
  'waiting_for_rebalance', 'platform_disabled', 'unknown_channel'])
/** Rebalance causes the service names (`/v1/status`'s `last_run.causes`). */
const CAUSES = new Set(['startup', 'schedule', 'config-changed', 'bot-online', 'bot-offline',
  'bot-status', 'channel-joined', 'channel-left', 'requested', 'takeover', 'operator'])
/** The rules a dry run names for a move. */
const RULES = new Set(['pin', 'hold', 'drain', 'bot-gone', 'priority', 'no-valid-bot', 'balance'])
/** Moves a dry run lists at most (the rest are counted). */
const MAX_MOVES = 10
/** Pins `pins` lists at most. */
const MAX_PINS = 20
/** Koishi's bot statuses, by `Universal.Status` value. */
const STATES = ['offline', 'online', 'connect', 'disconnect', 'reconnect']
/** How often `rebalance` looks whether its run has finished. */
const POLL_MS = 100

/**
 * Orders bot ids the way people read them: numbers (QQ numbers) by value, others as text.
 * @param {string} a @param {string} b
 */
function compareIds(a, b) {
  const na = /^\d+$/.test(a)
  const nb = /^\d+$/.test(b)
  if (na && nb) return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0)
  if (na !== nb) return na ? -1 : 1
  return a < b ? -1 : a > b ? 1 : 0
}

/**
 * The one bot of this Koishi that answers a command in a group, or null when none of them should
 * (another Koishi's bot holds the group). The same answer on every bot's session of one message,
 * since it is read from state they share:
 *
 * 1. the assignee of the group's row in Koishi's database (what this plugin applied, and what
 *    Koishi itself obeys; a row the plugin did not write stands for the service's assignee, see
 *    `Applier.disagreement`), else the service's assignee as the plugin last heard it: if that is
 *    an online bot of this Koishi, it answers; if it is a bot this Koishi does not run, none of
 *    ours does;
 * 2. otherwise (no assignee known, or ours but not online): the lowest id among this Koishi's
 *    online bots in the group (as reported to the service; all its online bots of the platform
 *    when it knows of none in the group).
 *
 * @param {Context} ctx @param {Applier} applier @param {Reporter} reporter
 * @param {string} platform @param {string} channel @param {string | undefined} row
 * @returns {string | null}
 */
function designated(ctx, applier, reporter, platform, channel, row) {
  /** @type {Map<string, import('koishi').Bot>} */
  const ours = new Map()
  for (const bot of ctx.bots) if (bot.platform === platform && bot.selfId) ours.set(bot.selfId, bot)
  const named = [row, applier.assigneeOf(platform, channel)].filter(a => typeof a === 'string' && a !== '')
  for (const id of named) {
    const bot = ours.get(/** @type {string} */ (id))
    if (bot?.status === Universal.Status.ONLINE) return /** @type {string} */ (id)
  }
  if (named.some(id => !ours.has(/** @type {string} */ (id)))) return null
  const online = (/** @type {string} */ id) => ours.get(id)?.status === Universal.Status.ONLINE
  let candidates = reporter.membersOf(platform, channel).filter(online)
  if (!candidates.length) candidates = [...ours.keys()].filter(online)
  return candidates.sort(compareIds)[0] ?? null
}

/**
 * Whether this session's bot answers the command: always in a direct chat, for a platform's own
 * command interaction and when the message mentions (at) this bot; never when it mentions
 * another bot; otherwise only the designated bot.
 * Koishi itself lets only the group's assignee (or the bot mentioned) run a command; this check
 * also holds where Koishi does not check, e.g. a plugin calling `session.execute` for every bot
 * that received a message.
 * @param {Context} ctx @param {Applier} applier @param {Reporter} reporter @param {Session} session
 */
function answers(ctx, applier, reporter, session) {
  if (session.isDirect) return true
  // a platform's own command (slash command, button) is addressed to the bot that got it
  if (session.type === 'interaction/command') return true
  const stripped = session.stripped
  if (stripped.atSelf) return true
  if (stripped.hasAt) return false
  const platform = session.platform
  const channel = session.guildId || session.channelId
  if (!platform || !channel) return true
  let row = /** @type {{ assignee?: string } | undefined} */ (session.channel)?.assignee
  // a row the plugin did not write counts as the service's assignee (and is written back)
  if (typeof row === 'string') row = applier.disagreement(platform, channel, row) ?? row
  return designated(ctx, applier, reporter, platform, channel, row) === session.selfId
}

/**
 * "12 s ago" in the user's locale.
 * @param {Session} session @param {number} ms since then
 */
function ago(session, ms) {
  const s = Math.max(0, Math.round(ms / 1000))
  if (s < 60) return session.text('auto-assign.ago.seconds', { n: s })
  if (s < 3600) return session.text('auto-assign.ago.minutes', { n: Math.floor(s / 60) })
  if (s < 86400) return session.text('auto-assign.ago.hours', { n: Math.floor(s / 3600) })
  return session.text('auto-assign.ago.days', { n: Math.floor(s / 86400) })
}

/**
 * A run's causes (`bot-offline, channel-joined ×50`), each known one translated.
 * @param {Session} session @param {string} causes
 */
function translateCauses(session, causes) {
  return causes.split(', ').filter(Boolean).map((part) => {
    const m = /^(\S+)(\s+×\d+)?$/.exec(part)
    if (!m || !CAUSES.has(m[1])) return part
    return session.text('auto-assign.cause.' + m[1]) + (m[2] ?? '')
  }).join(session.text('auto-assign.separator'))
}

/** @param {Session} session @param {number} status */
function stateText(session, status) {
  const name = STATES[status]
  return name ? session.text('auto-assign.state.' + name) : String(status)
}

/**
 * Registers the commands.
 * @param {Context} ctx @param {CommandOptions} options
 * @param {{ applier: Applier, reporter: Reporter }} parts
 */
function registerCommands(ctx, options, { applier, reporter }) {
  const logger = ctx.logger('auto-assign')

  /** The gate of every command: returns '' (no reply) on every bot but the one that answers.
   * Runs before Koishi's own checks, so a refused user, too, gets one refusal.
   * @param {{ session?: Session }} argv */
  const gate = ({ session }) => {
    if (!session || answers(ctx, applier, reporter, session)) return
    return ''
  }

  /**
   * A command, its alias, its authority, and the gate. `before`: a check that runs after the
   * gate and before Koishi's own (authority) checks.
   * @param {string} name @param {string} alias @param {number} authority
   * @param {(argv: any) => any} [before]
   * @returns {import('koishi').Command}
   */
  const command = (name, alias, authority, before) => {
    const cmd = ctx.command(name, { authority }).alias(alias).channelFields(['assignee'])
    if (before) cmd.before(before)
    return cmd.before(/** @type {any} */ (gate))
  }

  // A reply that does not throw: a refusal of the service is said in the user's words (`about`
  // names what the command was about), any other failure is logged and answered in words.
  // `call`: the command's requests (after a follower's 409, all of them go to the leader).
  /**
   * @typedef {{ platform?: string, channel?: string, bot?: string | null, until?: string }} About
   * @typedef {(method: string, path: string, body?: unknown) => Promise<any>} Call
   */
  /**
   * @param {Session | undefined} session
   * @param {(session: Session, op: { about: About, call: Call }) => Promise<string>} body
   */
  const reply = async (session, body) => {
    if (!session) return ''
    /** @type {About} */
    const about = {}
    const client = serviceClient(options)
    // A change the service put in force but could not store within 5 s (202, `stored: false`:
    // its database is failing) is said so: it is lost if the service stops before it is written.
    let unstored = false
    /** @type {Call} */
    const call = async (method, path, payload) => {
      const answer = await client(method, path, payload)
      if (answer?.stored === false) unstored = true
      return answer
    }
    try {
      const text = await body(session, { about, call })
      return unstored ? `${text}\n${session.text('auto-assign.not-stored')}` : text
    } catch (e) {
      const refused = refusal(session, e, about)
      if (refused) return refused
      if (!(e instanceof NetworkError) && !(e instanceof HttpError)) logger.warn(e)
      return failure(session, options.endpoint, e)
    }
  }

  command('auto-assign', '分配', options.readAuthority)
    .action(({ session }) => reply(session, async (session) => [
      session.text('.title'),
      session.text('.explain'),
      session.text('.status'),
      session.text('.pins'),
      session.text('.drains'),
      session.text('.preview'),
      session.text('.rebalance', { authority: options.changeAuthority }),
      session.text('.pin', { authority: options.changeAuthority }),
      session.text('.hold', { authority: options.changeAuthority }),
      session.text('.unpin', { authority: options.changeAuthority }),
      session.text('.drain', { authority: options.changeAuthority }),
      session.text('.undrain', { authority: options.changeAuthority }),
      session.text('.assign'),
    ].join('\n')))

  command('auto-assign.explain [group:string]', '.谁', options.readAuthority)
    .option('detail', '-d')
    .action(({ session, options: opts }, group) => reply(session, async (session, { call }) => {
      const target = parseTarget(ctx, session, group)
      if (!target) return session.text('.need-group')
      const { platform, channel } = target
      const x = await call('GET', `/v1/explain/${encodeURIComponent(platform)}/${encodeURIComponent(channel)}`)
      const lines = [x?.assignee
        ? session.text('.assigned', { channel, bot: x.assignee })
        : session.text('.unassigned', { channel })]
      const reason = typeof x?.reason === 'string' ? x.reason : ''
      lines.push(session.text('.reason', {
        reason: REASONS.has(reason) ? session.text('auto-assign.reason.' + reason) : session.text('auto-assign.reason.other', { reason }),
      }))
      // An operator's pin or hold, and the drained members.
      const pin = x?.pin && typeof x.pin === 'object' ? x.pin : null
      if (pin) {
        const made = untilAndNote(session, pin)
        if (pin.bot === null || pin.bot === undefined) lines.push(session.text('.held', { made }))
        else if (x.assignee === pin.bot) lines.push(session.text('.pinned', { bot: pin.bot, made }))
        else {
          lines.push(session.text(x.assignee ? '.pin-waiting' : '.pin-waiting-none', {
            bot: pin.bot, made, assignee: x.assignee ?? '',
          }))
        }
      }
      /** @type {string[]} */
      const drained = Array.isArray(x?.drained) ? x.drained : []
      if (drained.length) lines.push(session.text('.drained', { bots: drained.join(session.text('auto-assign.separator')) }))
      /** @type {Array<{ bot: string, online: boolean, load: number }>} */
      const members = Array.isArray(x?.members) ? x.members : []
      if (members.length) {
        const list = members.map(m => m.online
          ? session.text('.member-online', { bot: m.bot, load: m.load })
          : session.text('.member-offline', { bot: m.bot }))
        lines.push(session.text('.members', { members: list.join(session.text('auto-assign.separator')) }))
      }
      // What Koishi obeys here: the row, if this Koishi runs bots of that platform.
      if (ctx.bots.some(b => b.platform === platform)) {
        const rows = await ctx.database.get('channel', { platform, id: channel }, ['assignee'])
        const row = rows[0]?.assignee ?? ''
        const want = x?.assignee ?? ''
        if (row !== want) {
          if (row) lines.push(session.text('.row-differs', { row }))
          else lines.push(session.text('.row-missing'))
        }
      }
      if (opts?.detail && typeof x?.text === 'string') lines.push(session.text('.detail', { text: x.text }))
      return lines.join('\n')
    }))

  command('auto-assign.status', '.状态', options.readAuthority)
    .action(({ session }) => reply(session, async (session, { call }) => {
      const [status, fleet] = await Promise.all([call('GET', '/v1/status'), call('GET', '/v1/bots')])
      /** @type {Array<{ platform: string, bot: string, online: boolean, load: number }>} */
      const bots = Array.isArray(fleet) ? fleet : []
      const loads = new Map(bots.map(b => [b.platform + ':' + b.bot, b]))
      const ours = ctx.bots
        .map(b => ({ platform: b.platform ?? '', selfId: b.selfId ?? '', status: b.status }))
        .filter(b => b.platform && b.selfId)
        .sort((a, b) => a.platform.localeCompare(b.platform) || compareIds(a.selfId, b.selfId))
      const platforms = [...new Set(ours.map(b => b.platform))]
      const lines = [session.text('.reachable', { endpoint: options.endpoint })]
      for (const platform of platforms) {
        const counts = status?.platforms?.[platform]
        lines.push(counts
          ? session.text('.platform', { platform, assigned: counts.assigned ?? 0, unassigned: counts.unassigned ?? 0 })
          : session.text('.platform-unplanned', { platform }))
      }
      lines.push(session.text('.bots'))
      for (const b of ours) {
        const name = platforms.length > 1 ? `${b.platform}:${b.selfId}` : b.selfId
        const known = loads.get(b.platform + ':' + b.selfId)
        const state = stateText(session, b.status)
        lines.push(known
          ? session.text('.bot', { bot: name, state, load: known.load ?? 0 })
          : session.text('.bot-unknown', { bot: name, state }))
      }
      const mine = new Set(ours.map(b => b.platform + ':' + b.selfId))
      const others = bots.filter(b => platforms.includes(b.platform) && !mine.has(b.platform + ':' + b.bot))
      if (others.length) {
        lines.push(session.text('.others', {
          count: others.length,
          online: others.filter(b => b.online).length,
          load: others.reduce((n, b) => n + (b.load ?? 0), 0),
        }))
      }
      /** @type {Array<{ bot: string | null }>} */
      const pins = Array.isArray(status?.pins) ? status.pins : []
      const drains = Array.isArray(status?.drains) ? status.drains : []
      if (pins.length || drains.length) {
        const holds = pins.filter(p => p.bot === null).length
        lines.push(session.text('.overrides', { pins: pins.length - holds, holds, drains: drains.length }))
      }
      const run = status?.last_run
      lines.push(run
        ? session.text('.last-run', {
          number: run.number,
          ago: ago(session, Date.now() - run.finished_at_ms),
          causes: translateCauses(session, String(run.causes ?? '')),
          moved: (run.moved_forced ?? 0) + (run.moved_voluntary ?? 0),
        })
        : session.text('.no-run'))
      return lines.join('\n')
    }))

  // ---- the operator's changes -------------------------------------------------------------

  command('auto-assign.pin [bot:string]', '.固定', options.changeAuthority)
    .option('group', '-g <group:string>')
    .option('until', '-u <until:string>')
    .option('note', '-m <note:string>')
    .action(({ session, options: o }, bot) => reply(session, async (session, { about, call }) => {
      const target = parseTarget(ctx, session, o?.group)
      if (!target) return session.text('.need-group')
      // default: the bot the command was sent to
      const id = bot === undefined || bot === '' ? session.selfId : parseBot(bot, target.platform)
      if (!id) return session.text('auto-assign.refusal.bad-bot', { bot: bot ?? '' })
      Object.assign(about, target, { bot: id, until: o?.until })
      const body = { bot: id, note: authorNote(session, o?.note), ...(o?.until ? { until: String(o.until) } : {}) }
      const before = await lastRun(call)
      const pinned = await call('PUT', pinPath(target.platform, target.channel), body)
      await planned(call, before, options.requestTimeout)
      const now = await pinNow(call, target.platform, target.channel)
      const made = untilAndNote(session, { until: pinned?.until, note: o?.note })
      const lines = [session.text('.done', { channel: target.channel, bot: id, made })]
      if (now && now.assignee !== id) {
        lines.push(session.text(now.assignee ? '.waiting' : '.waiting-none', { bot: id, assignee: now.assignee ?? '' }))
      }
      return lines.join('\n')
    }))

  command('auto-assign.hold [group:string]', '.保持空', options.changeAuthority)
    .option('group', '-g <group:string>')
    .option('until', '-u <until:string>')
    .option('note', '-m <note:string>')
    .action(({ session, options: o }, group) => reply(session, async (session, { about, call }) => {
      const target = parseTarget(ctx, session, o?.group ?? group)
      if (!target) return session.text('.need-group')
      Object.assign(about, target, { until: o?.until })
      const body = { bot: null, note: authorNote(session, o?.note), ...(o?.until ? { until: String(o.until) } : {}) }
      const before = await lastRun(call)
      const held = await call('PUT', pinPath(target.platform, target.channel), body)
      await planned(call, before, options.requestTimeout)
      return session.text('.done', { channel: target.channel, made: untilAndNote(session, { until: held?.until, note: o?.note }) })
    }))

  command('auto-assign.unpin [group:string]', '.取消固定', options.changeAuthority)
    .option('group', '-g <group:string>')
    .action(({ session, options: o }, group) => reply(session, async (session, { about, call }) => {
      const target = parseTarget(ctx, session, o?.group ?? group)
      if (!target) return session.text('.need-group')
      Object.assign(about, target)
      const before = await lastRun(call)
      const ended = await call('DELETE', pinPath(target.platform, target.channel))
      await planned(call, before, options.requestTimeout)
      const now = await assigneeNow(call, target.platform, target.channel)
      const what = ended?.bot === null || ended?.bot === undefined ? session.text('.was-held') : session.text('.was-pinned', { bot: ended.bot })
      return session.text(now ? '.done' : '.done-none', { channel: target.channel, what, assignee: now ?? '' })
    }))

  command('auto-assign.drain <bot:string>', '.排空', options.changeAuthority)
    .option('until', '-u <until:string>')
    .option('note', '-m <note:string>')
    .action(({ session, options: o }, bot) => reply(session, async (session, { about, call }) => {
      const platform = session.platform
      const id = parseBot(bot, platform)
      if (!id) return session.text('auto-assign.refusal.bad-bot', { bot: bot ?? '' })
      Object.assign(about, { platform, bot: id, until: o?.until })
      const body = { note: authorNote(session, o?.note), ...(o?.until ? { until: String(o.until) } : {}) }
      const before = await lastRun(call)
      const drained = await call('PUT', drainPath(platform, id), body)
      await planned(call, before, options.requestTimeout)
      const list = await call('GET', '/v1/drains')
      /** @type {Array<{ platform: string, bot: string, kept?: number }>} */
      const drains = Array.isArray(list?.drains) ? list.drains : []
      const kept = drains.find(d => d.platform === platform && d.bot === id)?.kept ?? 0
      return session.text('.done', { bot: id, kept, made: untilAndNote(session, { until: drained?.until, note: o?.note }) })
    }))

  command('auto-assign.undrain <bot:string>', '.恢复', options.changeAuthority)
    .action(({ session }, bot) => reply(session, async (session, { about, call }) => {
      const platform = session.platform
      const id = parseBot(bot, platform)
      if (!id) return session.text('auto-assign.refusal.bad-bot', { bot: bot ?? '' })
      Object.assign(about, { platform, bot: id })
      const before = await lastRun(call)
      await call('DELETE', drainPath(platform, id))
      await planned(call, before, options.requestTimeout)
      return session.text('.done', { bot: id })
    }))

  // ---- the operator's views ---------------------------------------------------------------

  command('auto-assign.pins', '.固定列表', options.readAuthority)
    .action(({ session }) => reply(session, async (session, { call }) => {
      const list = await call('GET', '/v1/pins')
      /** @type {Array<{ platform: string, channel: string, bot: string | null, until?: string | null, note?: string | null, assignee?: string | null, state?: string }>} */
      const pins = Array.isArray(list?.pins) ? list.pins : []
      pins.sort((a, b) => a.platform.localeCompare(b.platform) || compareIds(a.channel, b.channel))
      if (!pins.length) return session.text('.none')
      const several = new Set(pins.map(p => p.platform)).size > 1
      const lines = [session.text('.title', { count: pins.length })]
      for (const p of pins.slice(0, MAX_PINS)) {
        const channel = several ? `${p.platform}:${p.channel}` : p.channel
        const made = untilAndNote(session, p)
        if (p.bot === null) lines.push(session.text('.held', { channel, made }))
        else if (p.state === 'waiting') {
          lines.push(session.text(p.assignee ? '.waiting' : '.waiting-none', { channel, bot: p.bot, assignee: p.assignee ?? '', made }))
        } else lines.push(session.text('.pinned', { channel, bot: p.bot, made }))
      }
      if (pins.length > MAX_PINS) lines.push(session.text('auto-assign.more', { count: pins.length - MAX_PINS }))
      return lines.join('\n')
    }))

  command('auto-assign.drains', '.排空列表', options.readAuthority)
    .action(({ session }) => reply(session, async (session, { call }) => {
      const list = await call('GET', '/v1/drains')
      /** @type {Array<{ platform: string, bot: string, until?: string | null, note?: string | null, kept?: number }>} */
      const drains = Array.isArray(list?.drains) ? list.drains : []
      drains.sort((a, b) => a.platform.localeCompare(b.platform) || compareIds(a.bot, b.bot))
      if (!drains.length) return session.text('.none')
      const several = new Set(drains.map(d => d.platform)).size > 1
      const lines = [session.text('.title', { count: drains.length })]
      for (const d of drains) {
        lines.push(session.text('.drain', {
          bot: several ? `${d.platform}:${d.bot}` : d.bot, kept: d.kept ?? 0, made: untilAndNote(session, d),
        }))
      }
      return lines.join('\n')
    }))

  command('auto-assign.preview', '.预演', options.readAuthority)
    .action(({ session }) => reply(session, async (session, { call }) => {
      const run = await call('POST', '/v1/rebalance?dryRun=true')
      /** @type {any[]} */
      const platforms = (Array.isArray(run?.platforms) ? run.platforms : [])
        .filter((/** @type {any} */ p) => (p.loads?.length ?? 0) > 0 || (p.moves?.length ?? 0) > 0)
      const ours = new Set(ctx.bots.map(b => b.platform))
      // this Koishi's platforms first
      platforms.sort((/** @type {any} */ a, /** @type {any} */ b) => Number(ours.has(b.platform)) - Number(ours.has(a.platform)) || String(a.platform).localeCompare(b.platform))
      const several = platforms.length > 1
      const sep = session.text('auto-assign.separator')
      const lines = [session.text('.title')]
      for (const p of platforms) {
        /** @type {Array<{ channel: string, from?: string | null, to?: string | null, kind: string, rule: string }>} */
        const moves = Array.isArray(p.moves) ? p.moves : []
        const prefix = several ? session.text('.platform', { platform: p.platform }) : ''
        lines.push(prefix + (moves.length
          ? session.text('.moves', { count: moves.length, forced: p.forced ?? 0, voluntary: p.voluntary ?? 0 })
          : session.text('.no-moves')))
        for (const m of moves.slice(0, MAX_MOVES)) {
          lines.push(session.text('.move', {
            channel: m.channel,
            from: m.from ?? session.text('.nobody'),
            to: m.to ?? session.text('.nobody'),
            rule: RULES.has(m.rule) ? session.text('auto-assign.rule.' + m.rule) : m.rule,
          }))
        }
        if (moves.length > MAX_MOVES) lines.push(session.text('auto-assign.more', { count: moves.length - MAX_MOVES }))
        /** @type {Array<{ bot: string, online: boolean, drained: boolean, before: number, after: number }>} */
        const loads = Array.isArray(p.loads) ? p.loads.slice() : []
        loads.sort((a, b) => compareIds(a.bot, b.bot))
        if (loads.length) {
          lines.push(session.text('.loads', {
            loads: loads.map(l => session.text(l.drained ? '.load-drained' : l.online ? '.load' : '.load-offline', {
              bot: l.bot, before: l.before, after: l.after,
            })).join(sep),
          }))
        }
        if (p.before && p.after) {
          lines.push(session.text('.spread', {
            before: Number(p.before.stddev ?? 0).toFixed(2),
            after: Number(p.after.stddev ?? 0).toFixed(2),
            maxBefore: p.before.max ?? 0,
            maxAfter: p.after.max ?? 0,
          }))
        }
      }
      if (!platforms.length) lines.push(session.text('.empty'))
      return lines.join('\n')
    }))

  // `rebalance -n` is the dry run, at the dry run's authority: this check runs before Koishi's
  // authority check of `rebalance`, and hands the message to `preview`, which Koishi checks.
  /** @param {{ session?: Session, options?: { dryRun?: boolean } }} argv */
  const dryRun = async ({ session, options: o }) => {
    if (!session || !o?.dryRun) return
    return session.execute({ name: 'auto-assign.preview', args: [], options: {} }, true)
  }

  command('auto-assign.rebalance', '.重新分配', options.changeAuthority, dryRun)
    .option('dryRun', '-n')
    .action(({ session }) => reply(session, async (session, { call }) => {
      const before = (await call('GET', '/v1/status'))?.last_run?.number ?? 0
      await call('POST', '/v1/rebalance')
      // The run is asynchronous: wait (at most requestTimeout) for one that counts the request.
      const deadline = Date.now() + options.requestTimeout
      while (Date.now() < deadline) {
        const run = (await call('GET', '/v1/status'))?.last_run
        if (run && run.number > before && /(^|, )requested( |,|$)/.test(String(run.causes))) {
          return session.text('.done', { number: run.number, moved: (run.moved_forced ?? 0) + (run.moved_voluntary ?? 0) })
        }
        await new Promise(resolve => setTimeout(resolve, POLL_MS))
      }
      return session.text('.pending')
    }))

  /**
   * The pin of a channel as the service lists it now (its state and the group's assignee).
   * @param {Call} call @param {string} platform @param {string} channel
   * @returns {Promise<{ bot: string | null, assignee: string | null, state: string } | null>}
   */
  async function pinNow(call, platform, channel) {
    const list = await call('GET', '/v1/pins')
    const pins = Array.isArray(list?.pins) ? list.pins : []
    return pins.find((/** @type {any} */ p) => p.platform === platform && p.channel === channel) ?? null
  }

  /** The service's assignee of a channel now, or null. @param {Call} call @param {string} platform @param {string} channel */
  async function assigneeNow(call, platform, channel) {
    const a = await call('GET', `/v1/assignments/${encodeURIComponent(platform)}/${encodeURIComponent(channel)}`)
    return typeof a?.assignee === 'string' && a.assignee ? a.assignee : null
  }
}

/**
 * The group a command is about: the argument (`123456`, or `platform:123456` for another
 * platform this Koishi has bots on), else the group the command was sent in.
 * @param {Context} ctx @param {Session} session @param {string | undefined} group
 * @returns {{ platform: string, channel: string } | null}
 */
function parseTarget(ctx, session, group) {
  const text = (group ?? '').trim()
  if (text) {
    const colon = text.indexOf(':')
    if (colon > 0) {
      const platform = text.slice(0, colon)
      if (ctx.bots.some(b => b.platform === platform)) return { platform, channel: text.slice(colon + 1) }
    }
    return { platform: session.platform, channel: text }
  }
  if (session.isDirect) return null
  const channel = session.guildId || session.channelId
  return channel ? { platform: session.platform, channel } : null
}

module.exports = { registerCommands, designated, answers, compareIds, parseTarget, REASONS, CAUSES, RULES }
