// The reconciler's only role: the built-in Reader on one subscription, so that Azure Resource Graph answers it with
// that subscription's VMs, Resource Health annotation changes and central scheduled events. main.bicep deploys
// this module once per subscription of reconcileSubscriptionIds (scope: subscription(id)); the deploying principal
// needs the right to assign roles there (Owner or User Access Administrator).

targetScope = 'subscription'

@description('Principal (object) id of the reconciler\'s identity.')
param principalId string

// Built-in role definition id (the same in every tenant).
var roleReader = 'acdd72a7-3385-4ef5-be7c-b4b1e6b5d46c'

resource reconcilerReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(subscription().id, principalId, roleReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleReader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
