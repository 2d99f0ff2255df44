// @ts-check
'use strict'
// koishi-plugin-auto-assign: Koishi follows the auto-assign service.
//
// * Fleet source: reports this Koishi's bots, their status and their guilds to the service
//   (PUT /v1/fleet/reporters/{name}, then events and heartbeats), and how many messages each
//   group receives (for the service's `balanceBy: messages`).
// * Applier: follows GET /v1/assignments/stream and writes each group's assignee with
//   ctx.database.upsert('channel', ...), so it works on every database Koishi supports.
// * Commands (src/commands.js): explain, status, pins, drains, the dry run (preview), rebalance,
//   pin, hold, unpin, drain, undrain, answered by one bot per group, in the user's locale
//   (locales/*.json), on the service's operator routes (src/operator.js).
// * Koishi's own `assign` (plugin-admin) becomes a pin or a hold in the service, and any row the
//   plugin did not write is reconciled with the service on the group's next message
//   (src/assign.js).

const { Schema } = require('koishi')
const { createHash } = require('node:crypto')
const { hostname } = require('node:os')
const { Link, loadCa, caFetch } = require('./client')
const { Reporter } = require('./reporter')
const { Applier } = require('./applier')
const { registerCommands } = require('./commands')
const { registerAssign } = require('./assign')
// JSON, not YAML: Node loads it without a build step or a YAML parser (see README).
const zhCN = require('../locales/zh-CN.json')
const enUS = require('../locales/en-US.json')

const name = 'auto-assign'
const inject = ['database']

/** @type {string} shown in the console, Chinese first */
const usage = `
跟随 **auto-assign** 服务：上报本 Koishi 的机器人和它们所在的群，并写入每个群的受理人（assignee），让每个群只由一个机器人回复。

* 在全局设置（koishi.yml）中设置 \`autoAssign: false\`，只让服务决定受理人。
* 服务的 config.yaml 需要 \`api.bind\` 和 \`sources.http\`；把它的 token 填到这里：\`report\` 角色（\`api.tokens\`）足以上报和跟随，改动分配的指令和 \`assign\` 需要 \`admin\`（\`api.token\` 就是 admin）。
* 服务开启 HTTPS（\`api.tls\`）时，\`endpoint\` 写 \`https://…\`；证书由自建 CA 签发时，把 CA 证书（PEM 文件路径或内容）填到 \`caFile\`。
* 不要把服务的 \`database.url\` 指向本 Koishi 的 SQLite 文件。
* 插件还会上报各群收到的消息数，供服务的 \`balanceBy: messages\` 使用（\`messageReportInterval\`，0 为关闭）。
* 指令：\`分配.谁\`、\`分配.状态\`、\`分配.固定\`、\`分配.保持空\`、\`分配.取消固定\`、\`分配.排空\`、\`分配.恢复\`、\`分配.固定列表\`、\`分配.排空列表\`、\`分配.预演\`、\`分配.重新分配\`（发送 \`分配\` 查看说明）。
* plugin-admin 的 \`assign\` 会成为服务中的固定（\`assign -r\`：保持空），重新分配和服务重启后仍然有效；用 \`分配.取消固定\` 解除。

Follows the **auto-assign** service: it reports this Koishi's bots and their groups, and writes
each group's assignee, so exactly one bot answers in each group.

* Set \`autoAssign: false\` in the global settings (koishi.yml), so that only the service decides.
* The service needs \`api.bind\` and \`sources.http\` in its config.yaml; put a token of it here: role
  \`report\` (\`api.tokens\`) does the reporting and following, the changing commands and \`assign\` need
  \`admin\` (\`api.token\` is admin).
* A service on HTTPS (\`api.tls\`): an \`https://…\` endpoint; a certificate of your own CA: that CA's
  certificate (a PEM file's path, or its text) in \`caFile\`.
* Never point the service's \`database.url\` at this Koishi's SQLite file.
* It also reports how many messages each group receives, for the service's \`balanceBy: messages\`
  (\`messageReportInterval\`; 0 turns that off).
* Commands: \`auto-assign.explain\`, \`status\`, \`pin\`, \`hold\`, \`unpin\`, \`drain\`, \`undrain\`, \`pins\`,
  \`drains\`, \`preview\`, \`rebalance\` (send \`auto-assign\` for the list).
* plugin-admin's \`assign\` becomes a pin in the service (\`assign -r\`: a hold), kept across rebalances
  and restarts of the service; \`auto-assign.unpin\` releases it.
`

const REPORTER_NAME = /^[A-Za-z0-9_.:-]*$/ // empty: the default

/**
 * The config as `apply` gets it: every key (the schema fills in the defaults).
 * @typedef {object} Config
 * @property {string} endpoint  URL of the service (its `api.bind`)
 * @property {string} token  a token of the service (`api.token`, or one of `api.tokens`: role report, admin for the changing commands); '': none
 * @property {string} caFile  for an https:// endpoint: the CA (PEM file path, relative to Koishi's directory, or PEM text) that signed the service's certificate; '': Node's built-in roots
 * @property {string} reporter  the name this Koishi reports its bots under; '': derived
 * @property {number} heartbeatInterval  ms
 * @property {number} batchSize  channel rows per `database.upsert`
 * @property {number} retryMin  ms
 * @property {number} retryMax  ms
 * @property {number} requestTimeout  ms
 * @property {number} messageReportInterval  seconds; 0: message counts are not reported
 * @property {number} readAuthority  authority the reading commands need (explain, status, pins, drains, preview)
 * @property {number} changeAuthority  authority the changing commands need (rebalance, pin, hold, unpin, drain, undrain)
 */

/**
 * One section of the config, its descriptions (and its title) from the locale files: Chinese
 * first, English; `''` (any other locale) gets the Chinese.
 * @template S @param {S} schema @param {'connection' | 'commands'} section @returns {S}
 */
function translated(schema, section) {
  const zh = zhCN._config[section]
  const en = enUS._config[section]
  return /** @type {any} */ (schema).i18n({ '': zh, 'zh-CN': zh, 'en-US': en })
}

/**
 * The config's schema: what the console shows, and what turns the config written in koishi.yml
 * or given to `ctx.plugin` (every key may be left out) into a `Config`. (The cast fails to
 * type-check when the schema and the `Config` typedef disagree.)
 */
const Config = /** @type {import('koishi').Schema<Partial<Config>, Config>} */ (Schema.intersect([
  translated(Schema.object({
    endpoint: Schema.string().role('link').default('http://127.0.0.1:8787'),
    token: Schema.string().role('secret').default(''),
    caFile: Schema.string().role('textarea', { rows: [1, 4] }).default(''),
    reporter: Schema.string().pattern(REPORTER_NAME).default(''),
    heartbeatInterval: Schema.natural().role('ms').min(200).default(10000),
    batchSize: Schema.natural().min(1).max(1000).default(100),
    retryMin: Schema.natural().role('ms').min(10).default(1000),
    retryMax: Schema.natural().role('ms').min(10).default(30000),
    requestTimeout: Schema.natural().role('ms').min(100).default(10000),
    messageReportInterval: Schema.number().min(0).default(10),
  }), 'connection'),
  translated(Schema.object({
    readAuthority: Schema.natural().max(5).default(1),
    changeAuthority: Schema.natural().max(5).default(4),
  }), 'commands'),
]))

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
  const baseDir = ctx.baseDir ?? process.cwd()
  const reporter = config.reporter || defaultReporter(baseDir)
  // A caFile that cannot be read stops the plugin here, naming the file (Koishi logs it).
  const ca = loadCa(config.caFile ?? '', baseDir)
  const fetch = ca ? caFetch(ca) : undefined
  const options = {
    endpoint: config.endpoint,
    token: config.token,
    fetch,
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

  for (const [locale, dict] of [['zh-CN', zhCN], ['en-US', enUS]]) {
    const { _config, ...messages } = /** @type {typeof zhCN} */ (dict)
    ctx.i18n.define(/** @type {string} */ (locale), messages)
  }
  registerCommands(ctx, {
    endpoint: config.endpoint,
    token: config.token,
    fetch,
    requestTimeout: config.requestTimeout,
    readAuthority: config.readAuthority ?? 1,
    changeAuthority: config.changeAuthority ?? 4,
  }, { applier, reporter: fleet })
  registerAssign(ctx, options, { applier, link, reporter: fleet })

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
  // each message once, and only where this Koishi answers it).
  if (options.messageReportInterval > 0) {
    ctx.on('message', (session) => fleet.onMessage(session, session.guildId ? applier.assigneeOf(session.platform, session.guildId) : undefined))
  }

  ctx.on('ready', async () => {
    logger.info('following the auto-assign service at %s as reporter %s%s', config.endpoint, reporter, ca ? ' (trusting the CA of caFile)' : '')
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
