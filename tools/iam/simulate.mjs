// Evaluates IAM requests with @cloud-copilot/iam-simulate (a real IAM policy evaluator with AWS's own
// action and resource data). Reads {"requests": [{id, principal, action, resource, account, context,
// policies: [{name, policy}]}]} on stdin; writes [{id, result, errors?}] on stdout, where result is
// Allowed, ImplicitlyDenied, ExplicitlyDenied or Error. Driven by scripts/iam_check.py (make iam-check).
import { runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const { requests } = JSON.parse(Buffer.concat(chunks).toString('utf8'))

const out = []
for (const r of requests) {
  const simulation = {
    identityPolicies: r.policies,
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    resourcePolicy: undefined,
    request: {
      principal: r.principal,
      action: r.action,
      resource: { resource: r.resource, accountId: r.account },
      contextVariables: r.context,
    },
  }
  try {
    const response = await runSimulation(simulation, {})
    if (response.resultType === 'error') {
      out.push({ id: r.id, result: 'Error', errors: response.errors })
    } else {
      out.push({ id: r.id, result: response.overallResult })
    }
  } catch (err) {
    out.push({ id: r.id, result: 'Error', errors: String(err && err.stack ? err.stack : err) })
  }
}
process.stdout.write(JSON.stringify(out))
