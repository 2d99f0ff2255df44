// @ts-check
'use strict'
// koishi-plugin-auto-assign: Koishi follows the auto-assign service.
//
// * Fleet source: reports this Koishi's bots, their status and their guilds to the service
//   (PUT /v1/fleet/reporters/{name}, then events and heartbeats), and how many messages each
//   group receives (for the service's `balanceBy: messages`).
// * Applier: follows GET /v1/assignments/stream and writes each group's assignee with
//   ctx.database.upsert('channel', ...), so it works on every database Koishi supports.

const { Schema } = require('koishi')
const { createHash } = require('node:crypto')
const { hostname } = require('node:os')
const { Link } = require('./client')
const { Reporter } = require('./reporter')
const { Applier } = require('./applier')

const name = 'auto-assign'
const inject = ['database']

const usage = `
Follows the **auto-assign** service: it reports this Koishi's bots and their groups, and writes
each group's assignee, so exactly one bot answers in each group.

* Set \`autoAssign: false\` in the global settings (koishi.yml), so that only the service decides.
* The service needs \`api.bind\` and \`sources.http\` in its config.yaml; put its \`api.token\` here.
* Never point the service's \`database.url\` at this Koishi's SQLite file.
* It also reports how many messages each group receives, for the service's \`balanceBy: messages\`
  (\`messageReportInterval\`; 0 turns that off).
`

const REPORTER_NAME = /^[A-Za-z0-9_.:-]*$/ // empty: the default

/**
 * @typedef {object} Config
 * @property {string} endpoint
 * @property {string} [token]
 * @property {string} [reporter]
 * @property {number} heartbeatInterval
 * @property {number} batchSize
 * @property {number} retryMin
 * @property {number} retryMax
 * @property {number} requestTimeout
 * @property {number} messageReportInterval
 */

/** @type {import('koishi').Schema<Config>} */
const Config = Schema.object({
  endpoint: Schema.string().role('link').default('http://127.0.0.1:8787')
    .description('URL of the auto-assign service (its `api.bind`).'),
  token: Schema.string().role('secret').default('')
    .description("The service's `api.token` (sent as `Authorization: Bearer ...`). Empty: none."),
  reporter: Schema.string().pattern(REPORTER_NAME).default('')
    .description('Name this Koishi reports its bots under (letters, digits, `_ . : -`); unique per Koishi instance. Empty: `koishi-<host>-<hash of the instance directory>`.'),
  heartbeatInterval: Schema.natural().role('ms').min(200).default(10000)
    .description("Heartbeat period; keep it well inside the service's `sources.http.offlineGrace` (default 30 s), e.g. a third."),
  batchSize: Schema.natural().min(1).max(1000).default(100)
    .description('Channel rows per `database.upsert`.'),
  retryMin: Schema.natural().role('ms').min(10).default(1000)
    .description('First retry delay while the service or the database fails; doubles per attempt.'),
  retryMax: Schema.natural().role('ms').min(10).default(30000)
    .description('Longest retry delay.'),
  requestTimeout: Schema.natural().role('ms').min(100).default(10000)
    .description('Timeout of one request to the service (and of one `getGuildList` page).'),
  messageReportInterval: Schema.number().min(0).default(10)
    .description('Seconds between two reports of how many messages each group received (each message counted once, however many bots got it), for the service\'s `balanceBy: messages`. 0: not reported.'),
})

/**
 * The default reporter name: stable for one Koishi instance, different for two instances (even on
 * one host), so two Koishis never replace each other's bots.
 * @param {string} baseDir
 */
function defaultReporter(baseDir) {
  const host = hostname().replace(/[^A-Za-z0-9_.-]+/g, '-').slice(0, 60) || 'host'
  const hash = createHash('sha256').update(baseDir).digest('hex').slice(0, 8)
  return `koishi-${host}-${hash}`
}

/** @param {import('koishi').Context} ctx @param {Config} config */
function apply(ctx, config) {
  const logger = ctx.logger('auto-assign')
  const reporter = config.reporter || defaultReporter(ctx.baseDir ?? process.cwd())
  const options = {
    endpoint: config.endpoint,
    token: config.token,
    reporter,
    heartbeatInterval: config.heartbeatInterval,
    batchSize: config.batchSize,
    retryMin: Math.min(config.retryMin, config.retryMax),
    retryMax: Math.max(config.retryMin, config.retryMax),
    requestTimeout: config.requestTimeout,
    messageReportInterval: config.messageReportInterval ?? 10,
  }
  const link = new Link(logger, config.endpoint)
  const fleet = new Reporter(ctx, options, link)
  const applier = new Applier(ctx, options, link, {
    // The stream came back: if the service restarted it has forgotten this reporter (a
    // heartbeat gets 409 and the full state follows at once, not at the next heartbeat).
    onReconnect: () => fleet.probe(),
  })

  ctx.on('login-added', (session) => {
    fleet.onLogin(session.bot)
    applier.kick() // maybe the first bot of its platform: write that platform's rows
  })
  ctx.on('login-updated', (session) => fleet.onLogin(session.bot))
  ctx.on('login-removed', (session) => fleet.onLogout(session.bot))

  /** @param {import('koishi').Session} session @param {'+' | '-'} op */
  const guild = (session, op) => {
    const id = session.guildId || session.event.guild?.id
    if (id) fleet.onGuild(session.bot, op, id)
  }
  // The bot itself joined or left a guild. Satori emits some of these under two names
  // (guild-deleted is also guild-removed); the reporter ignores repeats.
  ctx.on('guild-added', (session) => guild(session, '+'))
  ctx.on('guild-removed', (session) => guild(session, '-'))
  // (not in 4.18's typings; adapters dispatch it and satori renames it to guild-removed)
  ;/** @type {any} */ (ctx).on('guild-deleted', (/** @type {import('koishi').Session} */ session) => guild(session, '-'))
  ctx.on('guild-member-added', (session) => {
    if (session.userId && session.userId === session.selfId) guild(session, '+')
  })
  ctx.on('guild-member-removed', (session) => {
    if (session.userId && session.userId === session.selfId) guild(session, '-')
  })

  // Group messages, counted for the service's weights (every bot's copy: the reporter counts
  // each message once).
  if (options.messageReportInterval > 0) ctx.on('message', (session) => fleet.onMessage(session))

  ctx.on('ready', async () => {
    logger.info('following the auto-assign service at %s as reporter %s', config.endpoint, reporter)
    applier.start()
    await fleet.start()
  })

  ctx.on('dispose', () => {
    applier.dispose()
    // not awaited by Koishi: DELETE /v1/fleet/reporters/{name} takes our bots offline now
    fleet.dispose().catch(() => {})
  })
}

module.exports = { name, inject, usage, Config, apply, defaultReporter }
