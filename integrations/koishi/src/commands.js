// @ts-check
'use strict'
// Chat commands: ask the auto-assign service who answers in a group and why, how the fleet
// stands, and for a rebalance. Every reply goes through Koishi's i18n (locales/*.json), in the
// user's or channel's locale, Chinese first.
//
//   auto-assign              分配          the list of commands                  readAuthority
//   auto-assign.explain [g]  分配.谁       who answers in group g and why        readAuthority
//   auto-assign.status       分配.状态     service reachable, loads, last run    readAuthority
//   auto-assign.rebalance    分配.重新分配 a rebalance now                       changeAuthority
//
// Planned, once the service has the routes (issue 60): auto-assign.pin / unpin (分配.固定 /
// 分配.取消固定) and auto-assign.drain / undrain (分配.排空 / 分配.恢复), at changeAuthority, and
// auto-assign.rebalance --dry-run (-n) at readAuthority: each is one more `command()` below.
//
// In a group a command is answered once, by one bot: see `designated`.

const { Universal } = require('koishi')
const { HttpError, NetworkError, request } = require('./client')

/** @typedef {import('koishi').Context} Context */
/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./applier').Applier} Applier */
/** @typedef {import('./reporter').Reporter} Reporter */

/**
 * @typedef {object} CommandOptions
 * @property {string} endpoint
 * @property {string} [token]
 * @property {number} requestTimeout  ms
 * @property {number} readAuthority  explain, status (and the root command)
 * @property {number} changeAuthority  rebalance
 */

/** Reasons `GET /v1/explain` gives (others are shown as the service names them). */
const REASONS = new Set(['pinned', 'excluded', 'only_member', 'balanced', 'no_valid_bot',
  'waiting_for_rebalance', 'platform_disabled', 'unknown_channel'])
/** Rebalance causes the service names (`/v1/status`'s `last_run.causes`). */
const CAUSES = new Set(['startup', 'schedule', 'config-changed', 'bot-online', 'bot-offline',
  'bot-status', 'channel-joined', 'channel-left', 'requested', 'takeover'])
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
 *    Koishi itself obeys), else the service's assignee as the plugin last heard it: if that is
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
  const row = /** @type {{ assignee?: string } | undefined} */ (session.channel)?.assignee
  return designated(ctx, applier, reporter, platform, channel, row) === session.selfId
}

/**
 * A reply for a failed request to the service, in the user's locale (never thrown).
 * @param {Session} session @param {CommandOptions} options @param {unknown} e
 */
function failure(session, options, e) {
  if (e instanceof NetworkError) {
    return session.text('auto-assign.unreachable', { endpoint: options.endpoint, reason: e.message })
  }
  if (e instanceof HttpError) {
    if (e.status === 401 || e.status === 403) return session.text('auto-assign.unauthorized', { status: e.status })
    if (e.status >= 500 && e.status !== 501) {
      return session.text('auto-assign.unreachable', { endpoint: options.endpoint, reason: `HTTP ${e.status}${e.detail ? ` (${e.detail})` : ''}` })
    }
    return session.text('auto-assign.refused', { status: e.status, detail: e.detail || '-' })
  }
  return session.text('auto-assign.failed', { reason: e instanceof Error ? e.message : String(e) })
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
  /** @param {string} method @param {string} path */
  const call = (method, path) => request(options, method, path)

  /** The gate of every command: returns '' (no reply) on every bot but the one that answers.
   * Runs before Koishi's own checks, so a refused user, too, gets one refusal.
   * @param {{ session?: Session }} argv */
  const gate = ({ session }) => {
    if (!session || answers(ctx, applier, reporter, session)) return
    return ''
  }

  /**
   * @param {string} name @param {string} alias @param {number} authority
   * @returns {import('koishi').Command}
   */
  const command = (name, alias, authority) => ctx.command(name, { authority })
    .alias(alias)
    .channelFields(['assignee'])
    .before(/** @type {any} */ (gate))

  // A reply that does not throw: a failure is logged and answered in words.
  /**
   * @param {Session | undefined} session
   * @param {(session: Session) => Promise<string>} body
   */
  const reply = async (session, body) => {
    if (!session) return ''
    try {
      return await body(session)
    } catch (e) {
      if (!(e instanceof NetworkError) && !(e instanceof HttpError)) logger.warn(e)
      return failure(session, options, e)
    }
  }

  command('auto-assign', '分配', options.readAuthority)
    .action(({ session }) => reply(session, async (session) => [
      session.text('.title'),
      session.text('.explain'),
      session.text('.status'),
      session.text('.rebalance', { authority: options.changeAuthority }),
    ].join('\n')))

  command('auto-assign.explain [group:string]', '.谁', options.readAuthority)
    .option('detail', '-d')
    .action(({ session, options: opts }, group) => reply(session, async (session) => {
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
    .action(({ session }) => reply(session, async (session) => {
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

  command('auto-assign.rebalance', '.重新分配', options.changeAuthority)
    .action(({ session }) => reply(session, async (session) => {
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

module.exports = { registerCommands, designated, answers, compareIds, parseTarget, REASONS, CAUSES }
