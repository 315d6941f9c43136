// sevents on Azure: the Event Hubs transport and the blob container that holds ingest checkpoints.
//
// Least privilege, all through Microsoft Entra ID (managed identities):
//   - one user-assigned identity shared by every collector (attach it to each VM, scale set or AKS node pool,
//     or federate it with the collector's Kubernetes service account): "Azure Event Hubs Data Sender" on the
//     event hub only. One role assignment for the whole fleet: a subscription allows 4,000 of them;
//   - the ingest identity: "Azure Event Hubs Data Receiver" on the event hub only, and
//     "Storage Blob Data Contributor" on the checkpoint container only.
// Shared keys are off unless allowSasFallback is true; then one Send-only SAS rule exists on the hub
// for collectors that cannot use a managed identity (its key is read with listKeys, never output here).

targetScope = 'resourceGroup'

@description('Azure region of every resource.')
param location string = resourceGroup().location

@description('Event Hubs namespace name (globally unique; becomes <name>.servicebus.windows.net).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Event hub that carries the collectors\' records.')
param eventHubName string = 'scheduled-events'

@description('Partitions: the most ingest workers that can share the hub. Cannot be lowered later.')
@minValue(1)
@maxValue(32)
param partitionCount int = 8

@description('Days Event Hubs keeps events; ingest can fall this far behind (or restart a new consumer group from the start).')
@minValue(1)
@maxValue(7)
param retentionDays int = 7

@description('Throughput units (1 TU = 1 MB/s or 1000 events/s in). Auto-inflate raises it up to maxThroughputUnits.')
@minValue(1)
param throughputUnits int = 1

@maxValue(40)
param maxThroughputUnits int = 4

@description('Consumer group the ingest workers share.')
param consumerGroupName string = 'sevents-ingest'

@description('Storage account for checkpoints (globally unique, 3-24 lower-case letters and digits).')
@minLength(3)
@maxLength(24)
param storageAccountName string

param checkpointContainerName string = 'sevents-checkpoints'

@description('Name of the user-assigned identity every collector uses (its client id is output collectorClientId).')
param collectorIdentityName string = 'sevents-collectors'

@description('AKS: OIDC issuer URL of the cluster (az aks show --query oidcIssuerProfile.issuerUrl); empty: no AKS.')
param aksOidcIssuerUrl string = ''

@description('AKS: namespace and service account of the collector DaemonSet (infra/helm), federated with the identity.')
param aksServiceAccountSubject string = 'system:serviceaccount:sevents:sevents-collector'

@description('Principal (object) id of the managed identity that runs sevents-ingest.')
param ingestPrincipalId string

@description('Keep shared-key (SAS) access as a fallback for collectors without a managed identity.')
param allowSasFallback bool = false

// Built-in role definition ids (the same in every tenant).
var roleEventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var roleEventHubsDataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'
var roleStorageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  sku: {
    name: 'Standard' // 1 MB events and consumer groups; Basic allows neither the size nor more than one group
    tier: 'Standard'
    capacity: throughputUnits
  }
  properties: {
    disableLocalAuth: !allowSasFallback
    minimumTlsVersion: '1.2'
    isAutoInflateEnabled: maxThroughputUnits > throughputUnits
    maximumThroughputUnits: maxThroughputUnits > throughputUnits ? maxThroughputUnits : 0
  }
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: eventHubName
  properties: {
    partitionCount: partitionCount
    messageRetentionInDays: retentionDays
  }
}

resource consumerGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: hub
  name: consumerGroupName
  properties: {
    userMetadata: 'sevents ingest workers (blob checkpoints)'
  }
}

resource collectorSasRule 'Microsoft.EventHub/namespaces/eventhubs/authorizationRules@2024-01-01' = if (allowSasFallback) {
  parent: hub
  name: 'collectors-send'
  properties: {
    rights: [
      'Send'
    ]
  }
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS' // checkpoints are small and rebuildable: at worst a partition is read again
  }
  properties: {
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource checkpointContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: checkpointContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource collectorIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: collectorIdentityName
  location: location
}

// Workload identity: pods of the collector's service account exchange their token for this identity's.
resource collectorFederation 'Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials@2023-01-31' = if (!empty(aksOidcIssuerUrl)) {
  parent: collectorIdentity
  name: 'aks-sevents-collector'
  properties: {
    issuer: aksOidcIssuerUrl
    subject: aksServiceAccountSubject
    audiences: [
      'api://AzureADTokenExchange'
    ]
  }
}

resource collectorsSend 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: hub
  name: guid(hub.id, collectorIdentity.id, roleEventHubsDataSender)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataSender)
    principalId: collectorIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource ingestReceive 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: hub
  name: guid(hub.id, ingestPrincipalId, roleEventHubsDataReceiver)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleEventHubsDataReceiver)
    principalId: ingestPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource ingestCheckpoints 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: checkpointContainer
  name: guid(checkpointContainer.id, ingestPrincipalId, roleStorageBlobDataContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleStorageBlobDataContributor)
    principalId: ingestPrincipalId
    principalType: 'ServicePrincipal'
  }
}

@description('Collector and ingest setting eventhubs_namespace.')
output eventhubsNamespace string = '${namespace.name}.servicebus.windows.net'

@description('Collector and ingest setting eventhubs_name.')
output eventhubsName string = hub.name

@description('Ingest setting eventhubs_consumer_group (sevents-ingest, the ingest\'s default).')
output eventhubsConsumerGroup string = consumerGroup.name

@description('Ingest setting checkpoint_blob_url.')
output checkpointBlobUrl string = storage.properties.primaryEndpoints.blob

@description('Ingest setting checkpoint_container.')
output checkpointContainer string = checkpointContainer.name

@description('AZURE_CLIENT_ID of the collectors (managed identity on VMs; workloadIdentity.clientId of the Helm chart).')
output collectorClientId string = collectorIdentity.properties.clientId

@description('Resource id of the collectors\' identity: attach it to VMs, scale sets or node pools (identity.userAssignedIdentities).')
output collectorIdentityId string = collectorIdentity.id
