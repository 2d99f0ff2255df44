// @ts-check
'use strict'
// The chat commands (auto-assign / 分配, .explain / .谁, .status / .状态, .rebalance / .重新分配)
// on a real Koishi 4.18 (SQLite, autoAssign: false) with two OneBot-like mock bots in the same
// four groups, against the real service binary. Runs in order.
//
//   bot 1001: groups 1-4        bot 1002: groups 1-4
//
// Users (created before the first message): reader (authority 1), reader-en (1, locale en-US),
// admin (4), admin-en (4, en-US).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const { h } = require('koishi')
const plugin = require('../src')
const zh = require('../locales/zh-CN.json')
const en = require('../locales/en-US.json')
const { createKoishi, captureLogs, waitFor, PLATFORM, Universal } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const G = (/** @type {number} */ i) => String(400000 + i)
const GROUPS = [1, 2, 3, 4].map(G)
/** a group no bot reported: the service does not know it, Koishi has no row for it */
const UNKNOWN = G(9)
const BOTS = ['1001', '1002']

/** @type {string} */ let dir
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs
/** @type {Record<string, string>} */ let assignment

const pluginConfig = () => ({
  endpoint: service.endpoint,
  token: TOKEN,
  reporter: 'koishi-commands',
  heartbeatInterval: 1000,
  retryMin: 100,
  retryMax: 500,
  requestTimeout: 3000,
  messageReportInterval: 0,
})

/**
 * One group message from `user`, delivered to every bot in the group through Koishi's own
 * message handling (each bot gets its own session, as OneBot accounts do). Resolves with each
 * bot's replies, the test middleware's "pong" left out.
 * @param {string} group @param {string} user @param {string} content
 * @returns {Promise<Record<string, string[]>>}
 */
async function ask(group, user, content) {
  const replies = await Promise.all(BOTS.map(id => koishi.bot(id).client(user, group).receive(content)))
  return Object.fromEntries(BOTS.map((id, i) => [id, replies[i].filter((/** @type {string} */ r) => !/^pong:/.test(r))]))
}

/** The one bot that replied, and its one reply. @param {Record<string, string[]>} replies */
function single(replies) {
  const who = Object.entries(replies).filter(([, r]) => r.length)
  assert.equal(who.length, 1, `exactly one bot replies: ${JSON.stringify(replies)}`)
  const [bot, r] = who[0]
  assert.equal(r.length, 1, `one message: ${JSON.stringify(r)}`)
  return { bot, text: r[0] }
}

/**
 * The same message handed to every bot as a plugin does that calls `session.execute` from a
 * `message` listener: Koishi's own assignee check does not apply there, only the plugin's.
 * Resolves with each bot's output ('' for none).
 * @param {string} group @param {string} user @param {string} content
 * @returns {Promise<Record<string, string>>}
 */
async function executeOnEveryBot(group, user, content) {
  const out = await Promise.all(BOTS.map(async (id) => {
    const session = koishi.bot(id).session({
      type: 'message',
      platform: PLATFORM,
      user: { id: user },
      channel: { id: group, type: Universal.Channel.Type.TEXT },
      guild: { id: group },
      message: { id: 'm' + Math.random(), content, elements: h.parse(content) },
    })
    const result = await session.execute(content, true)
    return result.join('')
  }))
  return Object.fromEntries(BOTS.map((id, i) => [id, out[i]]))
}

/** `{name}` placeholders of a locale string filled in. @param {string} template @param {Record<string, unknown>} params */
const fill = (template, params) => template.replace(/\{(\w+)\}/g, (_, k) => String(params[k]))

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-commands-'))
  service = new Service({ dir, port: await freePort() })
  await service.start()
  logs = captureLogs()
  koishi = await createKoishi({
    dir,
    bots: BOTS.map(selfId => ({ selfId, guilds: GROUPS })),
    plugin,
    pluginConfig: pluginConfig(),
  })
  const db = koishi.app.database
  await db.createUser(PLATFORM, 'reader', { authority: 1 })
  await db.createUser(PLATFORM, 'reader-en', { authority: 1, locales: ['en-US'] })
  await db.createUser(PLATFORM, 'admin', { authority: 4 })
  await db.createUser(PLATFORM, 'admin-en', { authority: 4, locales: ['en-US'] })
  // every group assigned, and its row written
  assignment = await waitFor(async () => {
    const a = await service.assignments()
    if (!GROUPS.every(g => a[g])) return null
    const rows = Object.fromEntries((await koishi.rows()).map(r => [r.id, r.assignee]))
    return GROUPS.every(g => rows[g] === a[g]) ? a : null
  }, 10000, 'every group assigned and written')
})

after(async () => {
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('explain in a group: one reply, from the assignee, in Chinese by default', async () => {
  // both bots hold groups: the bot that answers is the assignee, not merely the lowest id
  assert.deepEqual(new Set(GROUPS.map(g => assignment[g])), new Set(BOTS), JSON.stringify(assignment))
  for (const g of GROUPS) {
    const { bot, text } = single(await ask(g, 'reader', 'auto-assign.explain'))
    assert.equal(bot, assignment[g], `group ${g}`)
    const x = (await service.api('GET', `/v1/explain/onebot/${g}`)).body
    assert.equal(x.assignee, assignment[g])
    assert.ok(text.startsWith(fill(zh.commands['auto-assign.explain'].messages.assigned, { channel: g, bot: assignment[g] })), text)
    assert.ok(text.includes(fill(zh.commands['auto-assign.explain'].messages.reason, { reason: /** @type {Record<string, string>} */ (zh['auto-assign'].reason)[x.reason] })), text)
    for (const m of x.members) assert.ok(text.includes(`${m.bot}（在线，负责 ${m.load} 个群）`), text)
  }
})

test('English for a user or a channel whose locale is en-US; the Chinese aliases; another group; a private chat', async () => {
  const [g1, g2] = GROUPS
  let r = single(await ask(g1, 'reader-en', '分配.谁'))
  assert.equal(r.bot, assignment[g1])
  assert.match(r.text, new RegExp(`^Group ${g1}: ${assignment[g1]} answers\\.\\nWhy: `))
  // -d: the service's own words too
  const x = (await service.api('GET', `/v1/explain/onebot/${g1}`)).body
  r = single(await ask(g1, 'reader', '分配.谁 -d'))
  assert.ok(r.text.endsWith(`\n服务的说明：${x.text}`), r.text)
  // the alias with a space, naming another group
  r = single(await ask(g1, 'reader', `分配 谁 ${g2}`))
  assert.equal(r.bot, assignment[g1], 'answered where it was asked')
  assert.ok(r.text.startsWith(`群 ${g2}：由 ${assignment[g2]} 回复。`), r.text)
  // a channel set to English answers a user without a locale in English
  await koishi.app.database.setChannel(PLATFORM, g2, { locales: ['en-US'] })
  try {
    r = single(await ask(g2, 'reader', 'auto-assign.explain'))
    assert.ok(r.text.startsWith(`Group ${g2}: ${assignment[g2]} answers.`), r.text)
  } finally {
    await koishi.app.database.setChannel(PLATFORM, g2, { locales: [] })
  }
  // a private chat: no group to default to, unless one is named
  const dm = koishi.bot('1002').client('reader', /** @type {any} */ (undefined))
  assert.deepEqual(await dm.receive('分配.谁'), [zh.commands['auto-assign.explain'].messages['need-group']])
  const [named] = await dm.receive(`分配.谁 ${g1}`)
  assert.ok(named.startsWith(`群 ${g1}：由 ${assignment[g1]} 回复。`), named)
  // a group the service does not know
  r = single(await ask(g1, 'reader-en', `auto-assign.explain ${UNKNOWN}`))
  assert.ok(r.text.includes(en['auto-assign'].reason.unknown_channel), r.text)
  assert.ok(r.text.startsWith(`Group ${UNKNOWN}: no bot answers now.`), r.text)
})

test('status: reachable, every bot of this Koishi with its load, the last rebalance; in both languages', async () => {
  const bots = /** @type {Array<{ bot: string, load: number }>} */ ((await service.api('GET', '/v1/bots')).body)
  const load = (/** @type {string} */ id) => bots.find(b => b.bot === id)?.load
  const { body: status } = await service.api('GET', '/v1/status')
  assert.ok(status.last_run, 'the service has run')

  let r = single(await ask(GROUPS[0], 'reader', '分配.状态'))
  assert.equal(r.bot, assignment[GROUPS[0]])
  const lines = r.text.split('\n')
  assert.equal(lines[0], `auto-assign 服务（${service.endpoint}）：可以连接。`)
  assert.ok(lines.includes('onebot：已分配 4 个群，0 个群没有可用的机器人。'), r.text)
  for (const id of BOTS) assert.ok(lines.includes(`· ${id}：在线，负责 ${load(id)} 个群`), r.text)
  assert.ok(lines.some(l => l.startsWith(`上次重新分配：第 ${status.last_run.number} 次，`)), r.text)

  r = single(await ask(GROUPS[1], 'reader-en', 'auto-assign.status'))
  assert.equal(r.bot, assignment[GROUPS[1]])
  assert.ok(r.text.startsWith(`auto-assign service (${service.endpoint}): reachable.`), r.text)
  for (const id of BOTS) assert.ok(r.text.includes(`· ${id}: online, ${load(id)} group(s)`), r.text)
  assert.match(r.text, /Last rebalance: #\d+, \d+ (s|min) ago; causes: /)
  // the root command lists the subcommands
  r = single(await ask(GROUPS[0], 'reader', '分配'))
  assert.ok(r.text.startsWith(zh.commands['auto-assign'].messages.title), r.text)
  assert.ok(r.text.includes('分配.重新分配'), r.text)
})

test('rebalance: refused below the authority, once; an admin gets it run', async () => {
  const before = (await service.api('GET', '/v1/status')).body.last_run.number
  const g = GROUPS[0]
  // Koishi answers its "low authority" through the assignee only
  let r = single(await ask(g, 'reader', 'auto-assign.rebalance'))
  assert.equal(r.bot, assignment[g])
  assert.equal(r.text, '权限不足。')
  r = single(await ask(g, 'reader-en', '分配.重新分配'))
  assert.equal(r.text, 'Low authority.')
  // and where Koishi does not check the assignee, the plugin's check comes first: one refusal
  const out = await executeOnEveryBot(g, 'reader', 'auto-assign.rebalance')
  assert.deepEqual(out, { [assignment[g]]: '权限不足。', [BOTS.find(b => b !== assignment[g]) ?? '']: '' })

  r = single(await ask(g, 'admin', '分配.重新分配'))
  assert.equal(r.bot, assignment[g])
  const m = /^重新分配完成（第 (\d+) 次）：移动了 (\d+) 个群。$/.exec(r.text)
  assert.ok(m, r.text)
  // the refusals asked for nothing: this is the first run since
  assert.equal(Number(m[1]), before + 1)
  const run = (await service.api('GET', '/v1/status')).body.last_run
  assert.ok(run.number >= before + 1)
  r = single(await ask(GROUPS[2], 'admin-en', 'auto-assign.rebalance'))
  assert.match(r.text, /^Rebalance #\d+ done: \d+ group\(s\) moved\.$/)
  assert.ok(Number(/#(\d+)/.exec(r.text)?.[1]) > Number(m[1]))
  assignment = await service.assignments()
})

test('one answer where Koishi does not check the assignee: the assignee, else the lowest id', async () => {
  for (const g of GROUPS) {
    await waitFor(async () => {
      const rows = Object.fromEntries((await koishi.rows()).map(x => [x.id, x.assignee]))
      return rows[g] === assignment[g]
    }, 3000, `row of ${g} written`)
    const out = await executeOnEveryBot(g, 'reader', 'auto-assign.explain')
    const who = Object.keys(out).filter(b => out[b])
    assert.deepEqual(who, [assignment[g]], `group ${g}: ${JSON.stringify(out)}`)
    assert.ok(out[assignment[g]].startsWith(`群 ${g}：由 ${assignment[g]} 回复。`))
  }
  // no assignee known anywhere: the lowest id of this Koishi's bots answers
  const out = await executeOnEveryBot(UNKNOWN, 'reader', 'auto-assign.status')
  assert.deepEqual(Object.keys(out).filter(b => out[b]), ['1001'], JSON.stringify(out))
  assert.ok(out['1001'].startsWith('auto-assign 服务'), out['1001'])
})

test('a command mentioning a bot is answered by that bot only, assignee or not', async () => {
  const g = GROUPS[0]
  const other = BOTS.find(b => b !== assignment[g]) ?? ''
  const replies = await ask(g, 'reader', `<at id="${other}"/> auto-assign.status`)
  assert.deepEqual(replies[assignment[g]], [], 'the assignee stays silent')
  assert.equal(replies[other].length, 1)
  assert.ok(replies[other][0].startsWith('auto-assign 服务'), replies[other][0])
})

test("a row written behind the plugin's back (an edit of the table, not an assign): the next message is answered as the service assigns, and the row written back", async () => {
  const g = GROUPS[3]
  const other = BOTS.find(b => b !== assignment[g]) ?? ''
  const edits = () => logs.records.filter(r => r.name === 'auto-assign' && r.content.includes(`channel onebot:${g}: assignee ${other} was not written by auto-assign`)).length
  const before = edits()
  // an edit of the table: the service is not told, the stream sends nothing
  await koishi.app.database.upsert('channel', [{ platform: PLATFORM, id: g, assignee: other }])
  // Koishi checks the row on every message: the very next one is answered by the service's bot
  const r = single(await ask(g, 'reader', '分配.谁'))
  assert.equal(r.bot, assignment[g], 'the service\'s assignee answers, not the edited row\'s')
  assert.ok(r.text.startsWith(`群 ${g}：由 ${assignment[g]} 回复。`), r.text)
  assert.doesNotMatch(r.text, /注意/, 'the row agrees again: nothing to note')
  // and the row says so again
  await waitFor(async () => (await koishi.rows()).find(x => x.id === g)?.assignee === assignment[g], 3000, 'the row written back')
  assert.equal(edits(), before + 1, 'logged once, not once per bot')
  // where Koishi does not check, too
  await koishi.app.database.upsert('channel', [{ platform: PLATFORM, id: g, assignee: other }])
  const out = await executeOnEveryBot(g, 'reader-en', 'auto-assign.explain')
  assert.deepEqual(Object.keys(out).filter(b => out[b]), [assignment[g]], JSON.stringify(out))
  await waitFor(async () => (await koishi.rows()).find(x => x.id === g)?.assignee === assignment[g], 3000, 'the row written back again')
})

test('the service unreachable: every command says so, translated, and throws nothing', async () => {
  await service.stop('SIGKILL')
  const g = GROUPS[0]
  // An exception: Koishi's command logger, or a warning of ours carrying a JavaScript error or
  // its stack. Not the outage warning ("auto-assign service at … unavailable: …"), which the
  // stream logs once whenever it notices the kill.
  const thrown = /\b(Type|Reference|Range|Syntax)Error\b|\n\s+at /
  const commandErrors = () => logs.records.filter(r => r.name === 'command' || (r.name === 'auto-assign' && r.type === 'warn' && thrown.test(r.content)))
  const errorsBefore = commandErrors().length
  const zhDown = `无法连接 auto-assign 服务（${service.endpoint}）：`
  const enDown = `Cannot reach the auto-assign service (${service.endpoint}): `
  for (const [user, content, prefix] of [
    ['reader', '分配.状态', zhDown],
    ['reader', 'auto-assign.explain', zhDown],
    ['admin', '分配.重新分配', zhDown],
    ['reader-en', 'auto-assign.status', enDown],
    ['admin-en', 'auto-assign.rebalance', enDown],
  ]) {
    const r = single(await ask(g, user, content))
    assert.equal(r.bot, assignment[g])
    assert.ok(r.text.startsWith(prefix), `${content}: ${r.text}`)
  }
  assert.equal(commandErrors().length, errorsBefore, 'no command failed with an exception')
})

test('authority levels come from the config', async () => {
  koishi.pluginFork.dispose()
  const fork = koishi.app.plugin(plugin, { ...pluginConfig(), readAuthority: 2, changeAuthority: 3 })
  try {
    const commander = /** @type {any} */ (koishi.app).$commander
    assert.deepEqual(commander.get('auto-assign.status').config.permissions, ['authority:2'])
    assert.deepEqual(commander.get('auto-assign.explain').config.permissions, ['authority:2'])
    assert.deepEqual(commander.get('auto-assign.rebalance').config.permissions, ['authority:3'])
    const g = GROUPS[0]
    assert.equal(single(await ask(g, 'reader', '分配.状态')).text, '权限不足。')
    // authority 4 passes (the service is down: it says so)
    assert.match(single(await ask(g, 'admin', '分配.状态')).text, /^无法连接 auto-assign 服务/)
  } finally {
    fork.dispose()
  }
  // the defaults again: 1 and 4
  const again = koishi.app.plugin(plugin, pluginConfig())
  try {
    const commander = /** @type {any} */ (koishi.app).$commander
    assert.deepEqual(commander.get('auto-assign.status').config.permissions, ['authority:1'])
    assert.deepEqual(commander.get('auto-assign.rebalance').config.permissions, ['authority:4'])
  } finally {
    again.dispose()
  }
})

test('every message was found in the locale files (no "missing" from Koishi\'s i18n)', () => {
  const missing = logs.records.filter(r => r.name === 'i18n' && /missing/.test(r.content))
  assert.deepEqual(missing.map(r => r.content), [])
})
