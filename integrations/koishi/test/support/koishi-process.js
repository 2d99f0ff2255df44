// @ts-check
'use strict'
// A Koishi in a process of its own, for the tests that kill one (test/crash.test.js): a real
// Koishi 4.18 App (createKoishi: SQLite in `dir`, OneBot-like mock bots) with the plugin. Driven
// over stdin and telling over stdout, one JSON object a line:
//
//   argv[2]  {"dir", "bots": [{"selfId", "guilds"}], "pluginConfig"}
//   stdin    {"op": "ping", "seq": 7, "group": "100001"}: the group message "ping 7" from the
//            user u<group>, delivered to every bot of this process in the group, each through
//            its own session (as a real group message reaches every member bot)
//   stdout   {"ev": "ready", "bots": [...]} once Koishi has started;
//            {"ev": "answer", "seq": 7, "group": "100001", "bot": "1001", "answered": true, "at": ms}
//            for every bot a message reached, once Koishi has handled it (`at`, Date.now()): whether that bot
//            answered (the test middleware's "pong", which only a bot past Koishi's assignee
//            check sends)
//   stdin closed: Koishi stops (the plugin's DELETE), and the process exits when that is done
//   stderr   Koishi's log (auto-assign's info and up, others' warnings and up)

const { Logger, h } = require('koishi')
const { createInterface } = require('node:readline')
const plugin = require('../../src')
const { createKoishi, PLATFORM } = require('./koishi')

/** @param {unknown} message */
const tell = (message) => process.stdout.write(JSON.stringify(message) + '\n')

async function main() {
  const { dir, bots, pluginConfig } = JSON.parse(process.argv[2])
  Logger.targets.splice(0, Logger.targets.length, {
    colors: 0,
    levels: { base: 2, 'auto-assign': 2, sqlite: 1 },
    record(/** @type {any} */ r) {
      process.stderr.write(`${new Date(r.timestamp).toISOString().slice(11, 23)} [${r.type}] ${r.name} ${r.content}\n`)
    },
  })
  const koishi = await createKoishi({ dir, bots, plugin, pluginConfig })
  // the senders' user rows, before any message: Koishi's concurrent first messages of one user
  // race on that INSERT
  const groups = new Set(bots.flatMap((/** @type {{ guilds: string[] }} */ b) => b.guilds))
  for (const g of groups) await koishi.app.database.createUser(PLATFORM, 'u' + g, { authority: 1 })
  tell({ ev: 'ready', bots: bots.map((/** @type {{ selfId: string }} */ b) => b.selfId) })

  // What each bot answered, by Koishi's own events: `before-send` names the message a reply
  // answers, `middleware` ends every message's handling (after its reply was sent). (The mock
  // client's receive() cannot tell: it hands a reply to the message that waits longest, and
  // none while messages of one client overlap, as they do here.)
  /** sessions (by id) that sent a reply @type {Set<number>} */
  const answered = new Set()
  koishi.app.on('before-send', (/** @type {any} */ _session, /** @type {any} */ options) => {
    if (options?.session?.id) answered.add(options.session.id)
  })
  koishi.app.on('middleware', (session) => {
    const m = /^ping (\d+)$/.exec(session.content ?? '')
    if (!m) return
    tell({ ev: 'answer', seq: +m[1], group: session.guildId, bot: session.selfId, answered: answered.delete(session.id), at: Date.now() })
  })

  const lines = createInterface({ input: process.stdin })
  lines.on('line', (line) => {
    /** @type {{ op: string, seq: number, group: string }} */
    const command = JSON.parse(line)
    if (command.op !== 'ping') return
    const { seq, group } = command
    const content = 'ping ' + seq
    for (const { selfId } of bots) {
      const bot = koishi.bot(selfId)
      if (!bot.guilds.has(group)) continue
      // one user per group (see createKoishi's whoAnswers); the mock client's receive() without
      // its bookkeeping of replies (see above), which its messages would pile up
      const client = bot.client('u' + group, group)
      client.replies = []
      bot.receive({ ...client.event, message: { id: `${selfId}-${seq}`, content, elements: h.parse(content) } }, client)
    }
  })
  // the driver is gone: stop as a Koishi stops (the plugin tells the service its bots are gone)
  lines.on('close', () => {
    koishi.stop().catch((e) => process.stderr.write(`koishi-process: stop: ${e?.stack ?? e}\n`))
  })
}

main().catch((e) => {
  process.stderr.write(`koishi-process: ${e?.stack ?? e}\n`)
  process.exit(1)
})
